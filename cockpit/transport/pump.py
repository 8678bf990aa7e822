"""Moving bytes from an agent's stream to the consumer, shared by SSH and local links.

One loop per link waits on a single readiness handle with a timeout (no busy polling),
drains stdout in large reads and hands the consumer chunks that end on a line boundary,
drains stderr every time (an agent that writes lots of diagnostics must never stall its
own stream by filling the channel window), and notices silence: no stdout for
`stale_after` seconds means the link is stale.
"""

from __future__ import annotations

import collections
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

READ_SIZE = 1 << 16
MAX_READ_BATCH = 1 << 22
# A line longer than this without a newline is cut and passed on (it will count as one
# malformed line downstream) rather than buffered without bound.
MAX_PARTIAL = 4 << 20
STDERR_LINES = 50


class StreamSource(Protocol):
    """The two output pipes and the input pipe of one running `agent stream`."""

    def filenos(self) -> list[int]: ...
    def read_out(self) -> bytes | None: ...
    def read_err(self) -> bytes | None: ...
    def finished(self) -> bool: ...
    def exit_status(self) -> int | None: ...
    def write(self, data: bytes) -> None: ...


class LineFramer:
    """Cuts a byte stream into chunks of whole lines, holding back the partial tail."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        """Whole lines ready to deliver (possibly empty)."""
        if self._tail:
            data = self._tail + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) > MAX_PARTIAL:
                self._tail = b""
                return data + b"\n"
            self._tail = data
            return b""
        self._tail = data[cut:]
        return data[:cut]

    @property
    def pending(self) -> int:
        return len(self._tail)

    def reset(self) -> int:
        """Forget a partial line (the connection that carried it is gone); its size."""
        size, self._tail = len(self._tail), b""
        return size


class StderrTail:
    """The last lines an agent wrote on stderr, kept for diagnostics."""

    def __init__(self, keep: int = STDERR_LINES) -> None:
        self.keep = keep
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = b""
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > 4096:
            lines.append(self._partial[:4096])
            self._partial = b""
        for line in lines[-self.keep :]:
            self._lines.append(line.decode("utf-8", "replace").rstrip("\r"))

    def lines(self) -> list[str]:
        extra = [self._partial.decode("utf-8", "replace")] if self._partial else []
        return [*self._lines, *extra]

    def summary(self, count: int = 3) -> str:
        shown = [line for line in self.lines() if line.strip()][-count:]
        return " | ".join(shown)


@dataclass
class PumpResult:
    """Why a pump ended: the stream closed (`eof`), went silent (`stale`) or was stopped."""

    reason: str
    got_data: bool
    exit_status: int | None = None
    dropped_partial: int = 0


def pump(
    source: StreamSource,
    deliver: Callable[[bytes], None],
    stderr: StderrTail,
    stale_after: float,
    stopping: Callable[[], bool],
    on_first_data: Callable[[], None],
    poll_interval: float = 1.0,
) -> PumpResult:
    """Run until the stream ends, goes stale or `stopping()` turns true."""
    framer = LineFramer()
    got_data = False
    last_data = time.monotonic()
    while True:
        if stopping():
            return PumpResult("stopped", got_data, dropped_partial=framer.reset())
        silent = time.monotonic() - last_data
        if silent >= stale_after:
            return PumpResult("stale", got_data, dropped_partial=framer.reset())
        wait = min(poll_interval, stale_after - silent)
        try:
            ready, _, _ = select.select(source.filenos(), [], [], wait)
        except (OSError, ValueError):  # a pipe closed under us: look at it once more
            time.sleep(0.05)
            ready = [True]
        if not ready:
            continue
        err = source.read_err()
        while err:
            stderr.feed(err)
            err = source.read_err()
        parts: list[bytes] = []
        size = 0
        while size < MAX_READ_BATCH:
            data = source.read_out()
            if not data:
                break
            parts.append(data)
            size += len(data)
        if parts:
            if not got_data:
                got_data = True
                on_first_data()
            last_data = time.monotonic()
            chunk = framer.feed(b"".join(parts) if len(parts) > 1 else parts[0])
            if chunk:
                deliver(chunk)
        elif source.finished():
            err = source.read_err()
            while err:
                stderr.feed(err)
                err = source.read_err()
            return PumpResult("eof", got_data, source.exit_status(), framer.reset())
