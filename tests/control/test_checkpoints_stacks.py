"""Choosing the checkpoint to restart from, and dumping the stacks of a hung process."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.job import stacks
from agent.wire import checkpoints


def _save(directory: Path, step: int, payload: bytes, marker: bool = True) -> Path:
    """A checkpoint as examples/charlm/checkpoint.py writes it: file, then marker."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ckpt-{step:08d}.pt"
    path.write_bytes(payload)
    if marker:
        (directory / f"{path.name}.done").write_text(json.dumps({
            "step": step, "file": path.name, "bytes": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest()}))  # fmt: skip
    return path


def test_newest_valid_skips_torn_corrupt_and_unmarked_checkpoints(tmp_path: Path) -> None:
    d = tmp_path / "ck"
    _save(d, 10, b"a" * 100)
    good = _save(d, 20, b"b" * 100)
    _save(d, 30, b"c" * 100).write_bytes(b"c" * 40)  # truncated after its marker
    corrupt = _save(d, 40, b"d" * 100)
    corrupt.write_bytes(b"e" * 100)  # same size, other bytes
    _save(d, 50, b"f" * 100, marker=False)  # the save never finished
    (d / ".ckpt-00000060.pt.123.tmp").write_bytes(b"partial")

    found, skipped = checkpoints.newest_valid(d)
    assert found is not None and found.path == good and found.step == 20
    reasons = {Path(p).name: why for p, why in skipped}
    assert list(reasons) == ["ckpt-00000050.pt", "ckpt-00000040.pt", "ckpt-00000030.pt"]
    assert "no completion marker" in reasons["ckpt-00000050.pt"]
    assert "checksum mismatch" in reasons["ckpt-00000040.pt"]
    assert "truncated" in reasons["ckpt-00000030.pt"]
    assert checkpoints.newest_valid(tmp_path / "absent") == (None, [])
    assert checkpoints.at_step(d, 10)[0].step == 10
    assert "checksum" in checkpoints.at_step(d, 40)[1]


def test_an_unreadable_checkpoint_is_skipped_with_its_reason(tmp_path: Path,
                                                            monkeypatch) -> None:
    d = tmp_path / "ck"
    good = _save(d, 300, b"g" * 100)
    failing = _save(d, 350, b"h" * 100)
    (d / "ckpt-loop-400.pt").symlink_to(d / "ckpt-loop-400.pt")
    sha256 = checkpoints._sha256

    def io_error(path: Path, size: int, mtime_ns: int) -> str:
        if path == failing:
            raise OSError(errno.EIO, "Input/output error", str(path))
        return sha256(path, size, mtime_ns)

    monkeypatch.setattr(checkpoints, "_sha256", io_error)
    found, skipped = checkpoints.newest_valid(d)
    assert found is not None and found.path == good
    reasons = {Path(p).name: why for p, why in skipped}
    assert reasons == {"ckpt-loop-400.pt": "unreadable: Too many levels of symbolic links",
                       "ckpt-00000350.pt": "unreadable: Input/output error"}


def test_set_aside_moves_an_earlier_runs_checkpoints_with_their_markers(tmp_path: Path) -> None:
    d = tmp_path / "run" / "checkpoints"
    _save(d, 100, b"a" * 10)
    _save(d, 2990, b"b" * 10)
    _save(d, 3000, b"c" * 10, marker=False)  # torn: moved too, it is no less the old run's
    (d / "notes.txt").write_text("kept")  # not a checkpoint: stays
    target, moved, failed = checkpoints.set_aside(d)
    assert target == tmp_path / "run" / "checkpoints.earlier-run-to-step-3000"
    assert failed == [] and len(moved) == 5
    assert checkpoints.newest_valid(d) == (None, [])
    assert checkpoints.newest_valid(target)[0].step == 2990
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]
    assert checkpoints.set_aside(d) == (None, [], [])  # nothing left: nothing to do


def test_copy_to_keeps_the_checkpoint_verifiable(tmp_path: Path) -> None:
    source, _ = checkpoints.inspect(_save(tmp_path / "a", 7, os.urandom(5000)))
    copied = checkpoints.copy_to(source, tmp_path / "fork" / "checkpoints")
    assert copied.step == 7 and copied.sha256 == source.sha256
    assert copied.path.parent == tmp_path / "fork" / "checkpoints"
    assert checkpoints.newest_valid(copied.path.parent)[0].path == copied.path


HANGING = textwrap.dedent("""
    import faulthandler, signal, sys, time
    if sys.argv[1] == "register":
        faulthandler.register(signal.SIGUSR1)
    def wait_here_forever():
        while True:
            time.sleep(0.05)
    print("ready", flush=True)
    wait_here_forever()
""")


def _wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / f"{mode}.err"
    proc = subprocess.Popen([sys.executable, "-c", HANGING, mode], stdout=subprocess.PIPE,
                            stderr=open(err, "wb"))  # noqa: SIM115 - closed with the process
    assert proc.stdout.readline() == b"ready\n"
    return proc, err


def test_faulthandler_stacks_of_a_stopped_process_and_none_for_others(
    tmp_path: Path, monkeypatch
) -> None:
    registered, err = _start(tmp_path, "register")
    plain, _ = _start(tmp_path, "plain")
    offset = [0]

    def new_output() -> str:
        data = err.read_bytes()
        text, offset[0] = data[offset[0] :].decode(), len(data)
        return text

    try:
        os.kill(registered.pid, signal.SIGSTOP)  # hung as a SIGSTOPped rank is
        _wait_until(lambda: stacks.is_stopped(registered.pid))
        assert stacks.catches_signal(registered.pid, signal.SIGUSR1)
        assert not stacks.catches_signal(plain.pid, signal.SIGUSR1)
        out = tmp_path / "stacks.txt"
        monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy: the faulthandler way
        result = stacks.dump_stacks({registered.pid: 0, plain.pid: 1}, out, new_output)
        assert result["method"] == "faulthandler" and result["ranks"] == [0]
        assert "did not register faulthandler" in result["unavailable"]["1"]
        text = out.read_text()
        assert "wait_here_forever" in text and result["file"] == str(out)
        _wait_until(lambda: stacks.is_stopped(registered.pid))  # left as it was found
        assert plain.poll() is None  # never sent a signal that would have killed it
    finally:
        for proc in (registered, plain):
            proc.kill()
            proc.wait(10)
            proc.stdout.close()


def test_the_digests_kept_are_bounded_and_the_newest_kept(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent up for months checksums one more checkpoint per restart, pause and fork:
    the digests it keeps are the newest few, not every file it ever read."""
    monkeypatch.setattr(checkpoints, "_verified", checkpoints.OrderedDict())
    monkeypatch.setattr(checkpoints, "_VERIFIED_KEPT", 4)
    files = []
    for i in range(6):
        path = tmp_path / f"ckpt-{i}.pt"
        path.write_bytes(b"x" * (i + 1))
        st = path.stat()
        files.append((path, st.st_size, st.st_mtime_ns))
        checkpoints._sha256(path, st.st_size, st.st_mtime_ns)
    assert [Path(p).name for p, _s, _m in checkpoints._verified] == [
        "ckpt-2.pt", "ckpt-3.pt", "ckpt-4.pt", "ckpt-5.pt"]
    checkpoints._sha256(*files[2])  # read again: the newest now
    checkpoints._sha256(*files[0])  # forgotten: read again, the oldest goes
    assert [Path(p).name for p, _s, _m in checkpoints._verified] == [
        "ckpt-4.pt", "ckpt-5.pt", "ckpt-2.pt", "ckpt-0.pt"]
