"""What the trainer writes is read with bounded memory: its stderr log (stacks of a hung
job, a failure's new lines), the spool files resumed after a restart, torchrun's error
file (whose timestamp is only taken when plausible)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job import bounded_read, recovery, stacks
from agent.job.bounded_read import LOG_TAIL_BYTES, new_lines, read_capped, read_new
from agent.job.output import TAIL_LINES
from agent.journal import spool
from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolTailer
from agent.wire.protocol import MAX_LOG_LINE

from .conftest import SpoolWriter

GIB = 1 << 30


def _sparse(path: Path, size: int, tail: bytes = b"") -> None:
    """A file of `size` zero bytes that takes no disk, then `tail`."""
    with open(path, "wb") as f:
        f.truncate(size)
    with open(path, "ab") as f:
        f.write(tail)


# -- the stderr log: read_new / new_lines ------------------------------------------------


def test_read_new_is_a_plain_read_when_little_is_new(tmp_path: Path) -> None:
    log = tmp_path / "job.err"
    log.write_bytes(b"one\ntwo\n")
    assert read_new(log, 0, 1 << 20) == (b"one\ntwo\n", 8)
    assert read_new(log, 4, 1 << 20) == (b"two\n", 8)
    assert read_new(log, 8, 1 << 20) == (b"", 8)
    assert read_new(log, 100, 1 << 20) == (b"", 100)  # shorter than the offset
    assert read_new(tmp_path / "gone.err", 3, 1 << 20) == (b"", 3)
    with open(log, "ab") as f:
        f.write(b"three")  # mid-line: read as it is, as a seek-and-read would
    assert read_new(log, 8, 1 << 20) == (b"three", 13)


def test_read_new_keeps_the_last_whole_lines_within_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "job.err"
    log.write_bytes(b"aaaaaaaaaa\nbbbb\ncccc\n")  # 21 bytes
    assert read_new(log, 0, 10) == (b"bbbb\ncccc\n", 21)  # the cut falls after a "\n"
    assert read_new(log, 0, 8) == (b"cccc\n", 21)  # "bbb\n" is no whole line
    assert read_new(log, 0, 5) == (b"cccc\n", 21)  # the cut falls at a line's start
    assert read_new(log, 0, 3) == (b"cc\n", 21)  # one long line's last bytes
    assert read_new(log, 0, 10, keep_head=True) == (b"aaaaaaaaaa", 21)  # rest skipped


def test_a_log_of_gigabytes_is_read_by_its_last_bytes(tmp_path: Path) -> None:
    log = tmp_path / "job.err"
    tail = b"[rank0]: RuntimeError: boom\nworker failed (exitcode: 1) local_rank: 0\n"
    _sparse(log, 8 * GIB, b"\n" + tail)  # gigabytes of one "line", then the failure
    data, end = read_new(log, 0, 1 << 20)
    assert end == 8 * GIB + 1 + len(tail) and data == tail
    lines = new_lines(log, 0)
    assert lines[-2:] == [line.decode() for line in tail.splitlines()]
    assert sum(len(line) + 1 for line in lines) <= LOG_TAIL_BYTES
    # The span the supervisor's tail holds for classify, each line cut to 4 KiB.
    assert LOG_TAIL_BYTES >= TAIL_LINES * MAX_LOG_LINE


def test_a_fifo_in_the_logs_place_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "job.err"
    os.mkfifo(fifo)
    assert read_new(fifo, 0, 1024) == (b"", 0)
    with pytest.raises(OSError, match="not a regular file"):
        read_capped(fifo, 1024)


# -- stacks: what is collected of the output is bounded ---------------------------------


def test_collect_keeps_a_bounded_head_of_a_flood_and_stops_early() -> None:
    calls = [0]
    chunk = "x" * (1 << 20)

    def flood() -> str:
        calls[0] += 1
        return chunk

    started = time.monotonic()
    text = stacks._collect(flood, 5.0)
    assert len(text) <= stacks.STACKS_MAX_BYTES + 200
    assert text.startswith(chunk) and "output cut at" in text[-200:]
    assert calls[0] <= stacks.STACKS_MAX_BYTES // len(chunk) + 1
    assert time.monotonic() - started < 4.0  # not the whole 5 s of a flood


def test_collect_is_unchanged_for_ordinary_dumps() -> None:
    parts = ["Thread 0x1 (most recent call first):\n", '  File "t.py", line 3 in f\n']

    def dumps() -> str:
        return parts.pop(0) if parts else ""

    assert stacks._collect(dumps, 5.0, quiet=0.1) == (
        'Thread 0x1 (most recent call first):\n  File "t.py", line 3 in f\n')


HANGING = textwrap.dedent("""
    import faulthandler, signal, sys, time
    faulthandler.register(signal.SIGUSR1)
    def wait_here_forever():
        while True:
            time.sleep(0.05)
    print("ready", flush=True)
    wait_here_forever()
""")


def test_stacks_after_gigabytes_of_output_with_the_bounded_reader(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """The hang path as managed.py wires it with `read_new`: a log that already holds
    gigabytes since the attempt began is never loaded; the dump is still found."""
    err = tmp_path / "job.err"
    _sparse(err, 4 * GIB)
    proc = subprocess.Popen([sys.executable, "-c", HANGING], stdout=subprocess.PIPE,
                            stderr=open(err, "ab"))  # noqa: SIM115 - closed with the process
    offset = [0]
    returned = []

    def new_output() -> str:
        data, offset[0] = read_new(err, offset[0], stacks.STACKS_MAX_BYTES, keep_head=True)
        returned.append(len(data))
        return data.decode("utf-8", "replace")

    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        monkeypatch.setenv("PATH", str(tmp_path))  # no py-spy: the faulthandler way
        out = tmp_path / "stacks.txt"
        result = stacks.dump_stacks({proc.pid: 0}, out, new_output)
        assert result["method"] == "faulthandler" and result["ranks"] == [0]
        assert "wait_here_forever" in out.read_text()
        assert max(returned) <= stacks.STACKS_MAX_BYTES
    finally:
        proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


# -- spool: resuming a file does not hold its journaled part ----------------------------


class _Reads:
    """A spool file whose reads are measured."""

    def __init__(self, f: Any, sizes: list) -> None:
        self._f, self._sizes = f, sizes

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._sizes.append(len(data))
        return data

    def __enter__(self) -> _Reads:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def test_resume_counts_the_journaled_part_in_bounded_reads(tmp_path: Path,
                                                           monkeypatch) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    writer = SpoolWriter(run, "j", 0)
    path = writer.new_file()
    prefix_lines = 20000
    writer.raw('{"t":"note","text":"already journaled, never read again"}\n' * prefix_lines)
    position = path.stat().st_size
    writer.raw("not json\n")  # line prefix_lines + 2 (the header is line 1)
    writer.train(7)
    state.mkdir()
    (state / "spool_positions.json").write_text(json.dumps(
        {"v": 1, "seq": 0, "files": {writer.file_id: position}}))
    sizes: list = []
    real_open = spool._open
    monkeypatch.setattr(spool, "_open", lambda p: _Reads(real_open(p), sizes))
    monkeypatch.setattr(spool, "_READ_LIMIT", 64 << 10)  # the prefix is ~1 MiB
    journal = Journal(state)
    tailer = SpoolTailer(journal, [run], settle=0.0)
    tailer.poll()
    journal.close()
    records = list(JournalReader(state).records())
    assert [r["step"] for r in records if r["t"] == "train"] == [7]
    errors = [r for r in records if r.get("kind") == "spool_error"]
    assert [e["data"]["line"] for e in errors] == [prefix_lines + 2]  # counted exactly
    assert position > 16 * (64 << 10) and max(sizes) <= 64 << 10


# -- torchrun's error file ----------------------------------------------------------------


def _error_file(tmp_path: Path, timestamp: Any, raw: str | None = None) -> Path:
    path = tmp_path / "error.json"
    if raw is None:
        raw = json.dumps({"message": {"message": "RuntimeError: boom", "extraInfo": {
            "py_callstack": "Traceback ...", "timestamp": timestamp}}})
    path.write_text(raw)
    return path


def test_a_plausible_timestamp_is_kept(tmp_path: Path) -> None:
    now = int(time.time())
    assert recovery.read_error_file(_error_file(tmp_path, str(now)))["timestamp"] == now
    at = time.time() - 45.5  # torchrun's teardown before it wrote the file
    assert recovery.read_error_file(_error_file(tmp_path, at))["timestamp"] == at
    assert recovery.read_error_file(_error_file(tmp_path, None))["timestamp"] is None


# Relative to now ("now-7200"), worked out in the test: parameters of the clock's value
# would differ between the workers that collect them.
@pytest.mark.parametrize("timestamp", [
    1.0, "1.0", 0, -1e9, "nan", "inf", "-inf", 1e300, "1e400", True,
    "now-7200",  # hours before the file was written: not this failure's time
    "now+3600",  # the future
    "9" * 50, [1, 2], {"a": 1},
])
def test_an_implausible_timestamp_is_no_failure_time(tmp_path: Path, timestamp: Any) -> None:
    if isinstance(timestamp, str) and timestamp.startswith("now"):
        timestamp = time.time() + float(timestamp[3:])
    error = recovery.read_error_file(_error_file(tmp_path, timestamp))
    assert error is not None and error["message"] == "RuntimeError: boom"
    assert error["timestamp"] is None


def test_non_finite_and_huge_numbers_in_the_json_itself(tmp_path: Path) -> None:
    for raw in ('{"message": "x", "timestamp": NaN}', '{"message": "x", "timestamp": -Infinity}',
                '{"message": "x", "timestamp": 1%s}' % ("0" * 400)):  # float() overflows
        error = recovery.read_error_file(_error_file(tmp_path, None, raw))
        assert error is not None and error["timestamp"] is None, raw


def test_a_huge_error_file_is_unreadable_with_its_reason(tmp_path: Path) -> None:
    path = _error_file(tmp_path, None, json.dumps({"message": "x" * (2 << 20)}))
    problems: list = []
    assert recovery.read_error_file(path, problems) is None
    assert len(problems) == 1 and f"larger than {1 << 20} bytes" in problems[0]
    _sparse(path, 8 * GIB)  # never read whole: at most the limit and one byte
    assert recovery.read_error_file(path) is None
    with pytest.raises(bounded_read.TooLarge):
        read_capped(path, 1 << 20)


def test_a_deeply_nested_error_file_is_unreadable(tmp_path: Path) -> None:
    path = _error_file(tmp_path, None, "[" * 200000)
    problems: list = []
    assert recovery.read_error_file(path, problems) is None
    assert "not JSON" in problems[0]


def test_a_fifo_as_error_file_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "error.json"
    os.mkfifo(fifo)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(recovery.read_error_file(fifo)),
                              daemon=True)
    reader.start()
    reader.join(5.0)
    if reader.is_alive():  # the old reader blocks in open(): let it go, then fail
        fd = os.open(str(fifo), os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5.0)
        pytest.fail("reading a FIFO error file blocked")
    assert result == [None]
