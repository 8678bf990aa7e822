"""A line appended to a job's control file (an adjust, a pause's `checkpoint_now`) that
the disk cuts short is reported failed, and the next line still begins a line of its
own, so the trainer parses it. Before, a buffered append left the partial line without
its newline, the next op's line was glued to it (the trainer refused both), and the
daemon acknowledged the second op as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.hook.control import ControlError, ControlFile, parse_line
from agent.wire import atomic

REPO = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[bytes]:
    return [raw for _, raw in ControlFile(str(path)).read_new()]


def test_a_short_append_is_an_error_and_the_next_line_is_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "control" / "job.ndjson"
    path.parent.mkdir()
    real_write = os.write
    cut = [True]

    def write(fd: int, data: bytes) -> int:
        if cut[0] and len(data) > 1:  # the disk takes ten bytes, then nothing
            cut[0] = False
            real_write(fd, bytes(data[:10]))
            return 10
        if not cut[0] and data == b"\n" and len(cut) == 1:
            cut.append(False)  # the newline after it fails too: the disk is full
            raise OSError(28, os.strerror(28))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    first = json.dumps({"id": "op-1", "knobs": {"lr_scale": 0.5}}).encode()
    with pytest.raises(OSError) as failed:
        atomic.append_line(path, first)
    assert "only 10 of the" in str(failed.value)
    assert not path.read_bytes().endswith(b"\n")  # what the disk took is left torn...
    second = json.dumps({"id": "op-2", "knobs": {"lr_scale": 0.25}}).encode()
    atomic.append_line(path, second)
    atomic.append_line(path, b'{"id":"op-3","knobs":{"eval_now":true}}\n')
    lines = _lines(path)
    assert lines == [first[:10], second, b'{"id":"op-3","knobs":{"eval_now":true}}']
    with pytest.raises(ControlError):  # ...and read as one malformed line of its own
        parse_line(lines[0], "line 1")
    assert parse_line(lines[1], "line 2") == ("op-2", {"lr_scale": 0.25})


def test_a_failed_append_ends_its_line_at_once_where_the_disk_allows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "job.ndjson"
    real_write = os.write
    cut = [True]

    def write(fd: int, data: bytes) -> int:
        if cut[0]:
            cut[0] = False
            return real_write(fd, bytes(data[:7]))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError):
        atomic.append_line(path, b'{"id":"op-1","knobs":{}}')
    assert path.read_bytes() == b'{"id":"\n'
    atomic.append_line(path, b'{"id":"op-2","knobs":{}}')
    assert path.read_bytes() == b'{"id":"\n{"id":"op-2","knobs":{}}\n'


# Run in a child: the file-size limit that cuts the write short is the whole process's.
_ADJUST_ON_A_FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    from agent.daemon import Daemon, DaemonConfig
    from agent.journal.control_inbox import append_op
    from agent.samplers.sim import SimGpus
    from agent.wire import paths

    state, run_dir = Path(sys.argv[1]), Path(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not death
    control = paths.control_file(run_dir, "j")
    control.parent.mkdir(parents=True)
    control.write_bytes(b"")
    daemon = Daemon(DaemonConfig(state, run_dirs=[run_dir]), gpus=SimGpus(1),
                    log=lambda msg: None)
    adjust = daemon.inbox.handlers["adjust"]
    calls = []

    def cut_short(op):
        calls.append(op)
        if len(calls) > 1:
            return adjust(op)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        # The file may grow by 20 bytes: the line is cut there (a real short write).
        resource.setrlimit(resource.RLIMIT_FSIZE, (control.stat().st_size + 20, hard))
        try:
            return adjust(op)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    daemon.inbox.handlers["adjust"] = cut_short
    for n, scale in ((1, 0.5), (2, 0.25)):
        append_op(state, {"op": "adjust", "id": "op-%d" % n, "job": "j",
                          "knobs": {"lr_scale": scale}})
        daemon.inbox.poll()
    daemon.journal.close()
    daemon._lock.release()
""")


@pytest.mark.skipif(sys.platform != "linux", reason="cut short by Linux's RLIMIT_FSIZE")
def test_an_adjust_cut_short_is_refused_and_the_next_one_parses(tmp_path: Path) -> None:
    state, run_dir = tmp_path / "state", tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", _ADJUST_ON_A_FULL_DISK, str(state),
                           str(run_dir)], cwd=str(REPO), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    from agent.journal.journal import JournalReader

    lines = _lines(run_dir / "control" / "j.ndjson")
    assert len(lines) == 2 and len(lines[0]) == 20, lines  # the cut line, on its own
    with pytest.raises(ControlError):
        parse_line(lines[0], "line 1")
    assert parse_line(lines[1], "line 2") == ("op-2", {"lr_scale": 0.25})
    acks = {r["data"]["id"]: r for r in JournalReader(state).records()
            if r.get("kind") == "control_ack"}
    assert acks["op-2"]["data"]["ok"] is True
    assert acks["op-1"]["data"]["ok"] is False
    assert "could not be written whole" in acks["op-1"]["data"]["error"]
