"""The stream's wake-up pipe stays set while either channel buffer holds data.

paramiko's own `OrPipe` loses a wake-up when a stderr arrival lands between the stdout
half's "is my partner set?" check and its clearing of the shared pipe; the stream then
sleeps until it goes stale. The interleaving is forced here with a pipe that pauses
inside `clear()` until the other thread has had its chance.
"""

from __future__ import annotations

import threading

from paramiko.buffered_pipe import BufferedPipe
from paramiko.pipe import make_or_pipe, make_pipe

from cockpit.transport.ssh_link import _ReadySide


class PausingPipe:
    """A paramiko pipe whose `clear()` waits for a rival `set()` (or a short timeout)."""

    def __init__(self) -> None:
        self.inner = make_pipe()
        self.clearing = threading.Event()
        self.rival_done = threading.Event()
        self.armed = False

    def set(self) -> None:
        self.inner.set()

    def clear(self) -> None:
        if self.armed:
            self.clearing.set()
            self.rival_done.wait(0.5)
        self.inner.clear()

    @property
    def is_set(self) -> bool:
        return self.inner._set

    def close(self) -> None:
        self.inner.close()


def race(halves) -> tuple[bool, bool]:
    """stdout is drained while stderr data arrives; (stderr has data, pipe is set)."""
    pipe, (out_side, err_side) = halves
    out, err = BufferedPipe(), BufferedPipe()
    out.set_event(out_side)
    err.set_event(err_side)
    out.feed(b"record\n")
    pipe.armed = True

    def arrive() -> None:
        pipe.clearing.wait(5)
        err.feed(b"diagnostics\n")
        pipe.rival_done.set()

    rival = threading.Thread(target=arrive)
    rival.start()
    out.read(100)
    rival.join()
    try:
        return err.read_ready(), pipe.is_set
    finally:
        pipe.close()


def locked_halves() -> tuple[PausingPipe, tuple[_ReadySide, _ReadySide]]:
    pipe = PausingPipe()
    lock = threading.Lock()
    out, err = _ReadySide(pipe, lock), _ReadySide(pipe, lock)
    out.partner, err.partner = err, out
    return pipe, (out, err)


def test_paramiko_or_pipe_loses_the_wake_up_under_this_interleaving() -> None:
    pipe = PausingPipe()
    assert race((pipe, make_or_pipe(pipe))) == (True, False)


def test_locked_halves_keep_the_pipe_set_while_stderr_waits() -> None:
    assert race(locked_halves()) == (True, True)


def test_pipe_clears_only_when_both_buffers_are_empty() -> None:
    pipe, (out, err) = locked_halves()
    out.set()
    err.set()
    out.clear()
    assert pipe.is_set
    err.clear()
    assert not pipe.is_set
    pipe.close()
