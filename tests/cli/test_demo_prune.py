"""Old demo runs are pruned, never a live one nor anything that is not a demo run."""

from __future__ import annotations

from pathlib import Path

from agent.lockfile import StateLock
from cockpit.demo import prune_demo_runs


def _run(root: Path, stamp: str) -> Path:
    run = root / stamp
    (run / "agent").mkdir(parents=True)
    (run / "recording.duckdb").write_bytes(b"x")
    return run


def test_keeps_the_newest_runs_and_any_run_still_going(tmp_path: Path) -> None:
    stamps = [f"2026113{d}-1200{s:02d}" for d in range(3) for s in range(3)]  # 9 runs
    runs = {stamp: _run(tmp_path, stamp) for stamp in stamps}
    other = tmp_path / "my-notes"
    other.mkdir()
    busy = StateLock(runs[stamps[0]] / "agent")  # the oldest run, its daemon still up
    busy.acquire()
    try:
        removed = prune_demo_runs(tmp_path, keep=4)
    finally:
        busy.release()
    newest = sorted(stamps)[-4:]
    assert sorted(p.name for p in removed) == sorted(stamps)[1:-4]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*newest, stamps[0], "my-notes"])


def test_nothing_to_prune(tmp_path: Path) -> None:
    assert prune_demo_runs(tmp_path / "absent") == []
    _run(tmp_path, "20261130-120000")
    assert prune_demo_runs(tmp_path, keep=1) == []
