"""A spool file read to its end and unchanged since is neither opened nor read again: a
rank that went away leaves its last file until a newer one of its rank comes, and every
job that ever ran in a run dir would otherwise cost two opens per poll, five polls a
second, on what is usually a shared mount."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent.journal import spool
from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolTailer


def _line(record: dict) -> str:
    return json.dumps(record) + "\n"


def _spool(run: Path, job: str, rank: int, file_id: str) -> Path:
    folder = run / "spool" / job
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank-{rank}.{file_id}.ndjson"
    path.write_text(_line({"t": "spool", "v": 1, "file_id": file_id, "job": job,
                           "rank": rank, "pid": os.getpid(), "ts": time.time()})
                    + _line({"t": "train", "step": 1, "loss": 0.5}))
    return path


def _steps(state: Path) -> list[tuple[str, int]]:
    return [(r["job"], r["step"]) for r in JournalReader(state).records()
            if r.get("t") == "train"]


def test_a_file_read_to_its_end_is_not_opened_again_until_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    ended = [_spool(run, f"old{i}", 0, f"a{i}") for i in range(5)]  # jobs gone away
    live = _spool(run, "live", 0, "b0")
    tailer = SpoolTailer(Journal(state), [run], settle=0.0)
    assert tailer.poll() == 6
    opened: list[str] = []
    real_open = spool._open

    def counting(path: Path):  # type: ignore[no-untyped-def]
        opened.append(Path(path).name)
        return real_open(path)

    monkeypatch.setattr(spool, "_open", counting)
    for _ in range(3):
        assert tailer.poll() == 0
    assert opened == []  # nothing changed: nothing opened
    with live.open("a") as f:
        f.write(_line({"t": "train", "step": 2, "loss": 0.4}))
    assert tailer.poll() == 1
    assert set(opened) == {live.name}  # the file that grew, and only it
    assert _steps(state)[-1] == ("live", 2)
    # A newer file of a quiet file's rank (the job started again): the quiet one is read
    # to its end once more and deleted, as any file with a newer one is.
    time.sleep(0.01)
    newer = _spool(run, "old1", 0, "c1")
    assert tailer.poll() == 1
    assert not ended[1].exists() and newer.exists()
    assert _steps(state)[-1] == ("old1", 1)
