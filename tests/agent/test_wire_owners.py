"""The contracts agent.wire owns: the atomic write, and the job's shared counters
(agent.job.progress) that the job's parts change only through their methods."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.job.progress import Progress
from agent.job.recovery import HangDetector
from agent.wire import atomic, paths


def test_an_atomic_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    atomic.write_text(target, "first")
    atomic.write_text(target, "second, longer")
    atomic.write_text(target, "3", durable=False)
    assert target.read_text() == "3"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_atomic_write_raises_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.mkdir()  # the rename over it fails once the text is written
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        atomic.write_text(target, "new")
    assert os.listdir(tmp_path) == ["state.json"]
    assert (target / "inside").read_text() == "kept"


def test_the_hooks_control_ledger_sits_beside_its_control_file(tmp_path: Path) -> None:
    control = paths.control_file(tmp_path, "job")
    assert control == tmp_path / "control" / "job.ndjson"
    assert paths.acked_file(control) == tmp_path / "control" / "job.acked.json"


def test_a_regroup_moves_the_old_groups_newest_step_before_the_new_group() -> None:
    progress = Progress(HangDetector(3.0, 10.0, 600.0))
    progress.new_attempt(100.0)
    progress.cur_max, progress.prev_max = 40, 12
    assert progress.new_generation(since=150.0, now=151.0) == 40
    assert (progress.cur_max, progress.prev_max, progress.attempt_started) == (None, 40, 150.0)
    # A group that never stepped: the newest step is still the one before it.
    assert progress.new_generation(since=160.0, now=161.0) == 40
    progress.note_xid(79)
    assert progress.telemetry() == {"xid": [79], "xid_unsure": []}
    progress.new_attempt(170.0)
    assert progress.telemetry() == {"xid": [], "xid_unsure": []} and progress.prev_max == 40
