"""Old demo runs are pruned, never a live one nor anything that is not a demo run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.lockfile import StateLock
from cockpit.app.demo import RECORDING_NAME, DemoRun, prune_demo_runs
from cockpit.errors import CockpitError
from cockpit.store import Store
from tests.read import synthetic as syn


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


def test_a_run_that_never_trained_is_not_kept(tmp_path: Path) -> None:
    """A demo quit before its first step leaves a recording with no step: it goes, and
    does not push out an older run that trained."""
    trained = [tmp_path / f"20261130-12000{s}" for s in range(3)]
    for run in trained:
        run.mkdir()
        syn.write_recording(run / RECORDING_NAME)
    empty = tmp_path / "20261130-130000"
    empty.mkdir()
    Store(empty / RECORDING_NAME).close()  # a recording, no record in it
    failed = tmp_path / "20261130-140000"
    (failed / "agent").mkdir(parents=True)  # stopped before its recording was made
    removed = prune_demo_runs(tmp_path, keep=3)
    assert sorted(removed) == [empty, failed]
    assert sorted(tmp_path.iterdir()) == trained


def test_a_daemon_that_refused_to_start_is_reported_with_its_log(tmp_path: Path) -> None:
    demo = DemoRun(run_root=tmp_path / "run", simulate_gpus=1)
    demo.run_root.mkdir(parents=True)
    (demo.run_root / "agent.log").write_text("cockpit-agent: error: bad --simulate-gpus\n")
    demo._daemon = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    demo._daemon.wait()
    with pytest.raises(CockpitError, match="exited with status 2 before the job started") as err:
        demo._check_daemon()
    assert "cockpit-agent: error: bad --simulate-gpus" in str(err.value)


def test_the_demos_trainer_settings_come_after_its_own(tmp_path: Path) -> None:
    """`cockpit demo --set` reaches the trainer after the demo's own settings, so that
    the operator's win (the trainer takes the last of a key)."""
    demo = DemoRun(run_root=tmp_path / "run", simulate_gpus=1,
                   settings=("model.n_layer=1", "fault.kill_at=7"))
    args = list(demo.job_spec("local").args)
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    assert sets[-2:] == ["model.n_layer=1", "fault.kill_at=7"]
    assert sets.index("fault.kill_at=0") < sets.index("fault.kill_at=7")


@pytest.mark.parametrize("setting", ["model.n_layer", "=2", "model..x=1", "a b=1", "x=1 2"])
def test_a_demo_setting_that_is_not_key_equals_value_is_refused(setting: str) -> None:
    done = subprocess.run([sys.executable, "-m", "cockpit", "demo", "--set", setting],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "expected KEY=VALUE" in done.stderr and repr(setting) in done.stderr
