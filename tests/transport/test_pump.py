"""Line framing and stderr keeping, the byte-level pieces of every link."""

from __future__ import annotations

from cockpit.transport.pump import MAX_PARTIAL, LineFramer, StderrTail


def test_framer_holds_partial_lines_until_complete() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"t":"gpu","seq":1}\n{"t":"gp') == b'{"t":"gpu","seq":1}\n'
    assert framer.pending == len(b'{"t":"gp')
    assert framer.feed(b'u","seq":2}') == b""
    assert framer.feed(b"\n") == b'{"t":"gpu","seq":2}\n'
    assert framer.pending == 0


def test_framer_passes_an_endless_line_on_instead_of_buffering_it() -> None:
    framer = LineFramer()
    assert framer.feed(b"x" * MAX_PARTIAL) == b""
    out = framer.feed(b"y")
    assert out.endswith(b"\n") and len(out) == MAX_PARTIAL + 2
    assert framer.pending == 0


def test_framer_reset_reports_the_dropped_tail() -> None:
    framer = LineFramer()
    framer.feed(b"abc")
    assert framer.reset() == 3
    assert framer.feed(b"\n") == b"\n"


def test_stderr_tail_keeps_the_last_lines() -> None:
    tail = StderrTail(keep=3)
    tail.feed(b"one\ntwo\nthree\nfour\nfi")
    tail.feed(b"ve\r\nsix")
    assert tail.lines() == ["three", "four", "five", "six"]
    assert tail.summary(2) == "five | six"
    assert tail.total_bytes == len(b"one\ntwo\nthree\nfour\nfive\r\nsix")
