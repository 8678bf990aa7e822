"""The stream's control reader: stdin that cannot be read any more ends the stream
non-zero, saying why on stderr; one line that cannot be handed over is said and
answered, and the lines after it still reach the agent. Before, any such error ended
the reader in silence (`except (OSError, ValueError): pass`) and the stream exited 0,
so the cockpit's later ops went nowhere without a word."""

from __future__ import annotations

import fcntl
import io
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.journal.control_inbox import inbox_path
from agent.journal.stream import _ControlReader, run_stream
from tests.harness.waiting import wait_for


def _wait_for(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """`timeout` only bounds a hang (`tests.harness.waiting.wait_for`, polled every 20 ms)."""
    wait_for(cond, timeout, what, poll=0.02)


def _handed(state: Path) -> list[dict]:
    try:
        raw = inbox_path(state).read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def test_stdin_that_cannot_be_read_ends_the_stream_non_zero_and_says_why(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    stdin = os.open(str(tmp_path), os.O_RDONLY)  # reading a directory: EISDIR
    out_r, out_w = os.pipe()
    said = io.StringIO()
    result: list[int] = []
    try:
        stream = threading.Thread(target=lambda: result.append(run_stream(
            state, 0, stdin_fd=stdin, stdout_fd=out_w, stderr=said, poll=0.02)),
            daemon=True)
        stream.start()
        stream.join(30)
        assert not stream.is_alive()
    finally:
        os.close(stdin)
        os.close(out_w)
        os.close(out_r)
    assert result == [1]
    text = said.getvalue()
    assert "reading control ops from stdin failed: IsADirectoryError" in text, text
    assert text.isascii()


def test_a_line_that_cannot_be_handed_over_is_answered_and_reading_goes_on(
        tmp_path: Path) -> None:
    """A lone surrogate (valid JSON, `\\ud800`) cannot be written as UTF-8: that op is
    handed over as malformed, with its id, so it is refused by name; the next is
    handed over as sent."""
    state = tmp_path / "state"
    read_end, write_end = os.pipe()
    said = io.StringIO()
    reader = _ControlReader(state, read_end, said)
    reader.start()
    try:
        os.write(write_end, b'{"op":"adjust","id":"op-1","job":"j","knobs":{"x":"\\ud800"}}\n')
        os.write(write_end, b'{"op":"stop","id":"op-2","job":"j"}\n')
        _wait_for(lambda: len(_handed(state)) == 2, "both lines handed over")
        assert reader.is_alive() and not reader.eof.is_set()
    finally:
        os.close(write_end)
        reader.join(10)
        os.close(read_end)
    first, second = _handed(state)
    assert first["id"] == "op-1" and first["op"] == "adjust"
    assert "could not be handed to the agent" in first["_malformed"]
    assert second["id"] == "op-2" and second["op"] == "stop" and "_malformed" not in second
    assert reader.error is None  # stdin ended: no error, the stream ends 0
    text = said.getvalue()
    assert "control line 1 could not be handed to the agent" in text and text.isascii()


def test_a_non_blocking_stdin_is_waited_on(tmp_path: Path) -> None:
    state = tmp_path / "state"
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(read_end, fcntl.F_GETFL)
    fcntl.fcntl(read_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    said = io.StringIO()
    reader = _ControlReader(state, read_end, said)
    reader.start()
    try:
        time.sleep(0.2)  # nothing to read yet: EAGAIN, which is no reason to end
        assert reader.is_alive() and not reader.eof.is_set()
        os.write(write_end, b'{"op":"ping","id":"op-1"}\n')
        _wait_for(lambda: _handed(state), "the op handed over")
    finally:
        os.close(write_end)
        reader.join(10)
        os.close(read_end)
    assert [e["id"] for e in _handed(state)] == ["op-1"]
    assert reader.error is None and said.getvalue() == ""
