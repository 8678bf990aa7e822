"""Checkpoints as frameworks write them: a file or a directory, vouched for by the marker
the trainer side writes once the save finished (or, for torch.distributed.checkpoint, by
its own `.metadata` commit file); and the environment that tells a restart where to
resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.wire import checkpoints
from agent.wire.checkpoints import CHECKPOINT_DIR_ENV, RESUME_ENV, mark_complete


def _hf_dir(parent: Path, step: int) -> Path:
    """A checkpoint folder shaped like a Hugging Face Trainer's."""
    d = parent / f"checkpoint-{step}"
    (d / "sub").mkdir(parents=True)
    (d / "model.safetensors").write_bytes(os.urandom(300))
    (d / "optimizer.pt").write_bytes(os.urandom(200))
    (d / "sub" / "rng_state_1.pth").write_bytes(b"r" * 50)
    return d


def test_a_marked_directory_is_valid_and_a_torn_one_says_what_is_missing(tmp_path) -> None:
    good = _hf_dir(tmp_path, 10)
    marker = mark_complete(good, 10)
    assert marker == tmp_path / "checkpoint-10.done"
    assert json.loads(marker.read_text())["files"]["sub/rng_state_1.pth"] == 50
    deleted = _hf_dir(tmp_path, 20)
    mark_complete(deleted, 20)
    (deleted / "optimizer.pt").unlink()  # half-deleted by a rotation, say
    cut = _hf_dir(tmp_path, 30)
    mark_complete(cut, 30)
    (cut / "model.safetensors").write_bytes(b"x" * 10)
    _hf_dir(tmp_path, 40)  # the save never finished (or nothing marks it)

    found, skipped = checkpoints.newest_valid(tmp_path)
    assert found is not None and found.path == good and found.step == 10
    assert found.kind == "dir" and found.bytes == 550 and found.sha256 is None
    why = {Path(p).name: w for p, w in skipped}
    assert why["checkpoint-40"].startswith("no completion marker checkpoint-40.done: its "
                                           "save did not finish, or what saved it writes none")
    assert why["checkpoint-30"] == ("incomplete: model.safetensors has 10 bytes on disk, "
                                    "300 recorded")
    assert why["checkpoint-20"] == "incomplete: optimizer.pt is missing (listed in " \
                                   "checkpoint-20.done)"


def test_a_file_marker_without_a_checksum_checks_the_size(tmp_path) -> None:
    ck = tmp_path / "epoch=0-step=12.ckpt"
    ck.write_bytes(b"w" * 64)
    mark_complete(ck, 12)
    found, why = checkpoints.inspect(ck)
    assert why is None and found.step == 12 and found.kind == "file" and found.sha256 is None
    with_sum = tmp_path / "last-15.ckpt"
    with_sum.write_bytes(b"s" * 64)
    mark_complete(with_sum, 15, checksum=True)
    with_sum.write_bytes(b"t" * 64)  # same size, other bytes
    assert "checksum mismatch" in checkpoints.inspect(with_sum)[1]
    ck.write_bytes(b"w" * 60)
    assert checkpoints.inspect(ck)[1] == "truncated or extended: 60 bytes on disk, 64 recorded"
    with pytest.raises(ValueError, match="whole number"):
        mark_complete(ck, -1)


def test_a_marker_for_a_file_does_not_vouch_for_a_directory(tmp_path) -> None:
    d = _hf_dir(tmp_path, 5)
    (tmp_path / "checkpoint-5.done").write_text(json.dumps({"step": 5, "bytes": 4096}))
    assert "lacks 'files'" in checkpoints.inspect(d)[1]
    (tmp_path / "checkpoint-5.done").write_text(json.dumps(
        {"step": 5, "files": {"../../etc/passwd": 1}}))
    assert "not a path inside the directory" in checkpoints.inspect(d)[1]


def test_a_dcp_directory_commits_with_its_metadata_file(tmp_path) -> None:
    d = tmp_path / "step_300"
    d.mkdir()
    (d / "__0_0.distcp").write_bytes(b"a" * 100)
    assert "no completion marker" in checkpoints.inspect(d)[1]
    (d / ".metadata").write_bytes(b"m" * 20)
    found, why = checkpoints.inspect(d)
    assert why is None and (found.step, found.kind, found.bytes) == (300, "dcp", 120)


def test_orphan_markers_of_rotated_checkpoints_are_pruned(tmp_path) -> None:
    old = _hf_dir(tmp_path, 1)
    mark_complete(old, 1)
    for path in sorted(old.rglob("*"), reverse=True):  # the framework's rotation
        path.unlink() if path.is_file() else path.rmdir()
    old.rmdir()
    mark_complete(_hf_dir(tmp_path, 2), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-2.done"]


def test_copy_and_set_aside_move_directories_with_their_markers(tmp_path) -> None:
    src = tmp_path / "a"
    d = _hf_dir(src, 7)
    mark_complete(d, 7)
    source, _ = checkpoints.inspect(d)
    copied = checkpoints.copy_to(source, tmp_path / "fork")
    assert copied.kind == "dir" and copied.step == 7 and copied.bytes == source.bytes
    target, moved, failed = checkpoints.set_aside(tmp_path / "fork")
    assert failed == [] and sorted(Path(p).name for p in moved) == [
        "checkpoint-7", "checkpoint-7.done"]
    assert checkpoints.newest_valid(target)[0].step == 7


def test_a_restart_always_says_where_it_resumes_from() -> None:
    wire = {"name": "j", "script": "t.py", "run_dir": "/r", "nproc_per_node": 1,
            "resume": {"env": "MY_RESUME"}}
    launch = LaunchSpec(wire)
    env = launch.environment("/r/checkpoints/checkpoint-40")
    assert env[RESUME_ENV] == env["MY_RESUME"] == "/r/checkpoints/checkpoint-40"
    assert env[CHECKPOINT_DIR_ENV] == "/r/checkpoints"
    fresh = launch.environment(None)
    assert RESUME_ENV not in fresh and "MY_RESUME" not in fresh
    plain = LaunchSpec({**wire, "resume": {}}).environment("/r/checkpoints/x.pt")
    assert plain[RESUME_ENV] == "/r/checkpoints/x.pt"
