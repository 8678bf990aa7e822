"""Moving bytes from an agent's stream to the consumer, shared by SSH and local links.

A stream's loop (on its link's own thread, `StreamPump.run_alone`, or on the thread
that reads every SSH link's stream, `cockpit.transport.shared_reader`) waits on a
single readiness handle per stream with a timeout (no busy polling),
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

from cockpit.printable import printable

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
    """The last lines an agent wrote on stderr, kept for diagnostics: each as text
    (`cockpit.printable`), since a link's state quotes them to the operator."""

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
            self._lines.append(printable(line.decode("utf-8", "replace").rstrip("\r")))

    def lines(self) -> list[str]:
        extra = [printable(self._partial.decode("utf-8", "replace"))] if self._partial else []
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


class StreamPump:
    """One stream's pumping state between two readiness checks: what a loop over one
    link (`run_alone`) or over every link (`cockpit.transport.shared_reader`) keeps of it."""

    def __init__(
        self,
        source: StreamSource,
        deliver: Callable[[bytes], None],
        stderr: StderrTail,
        stale_after: float,
        stopping: Callable[[], bool],
        on_first_data: Callable[[], None],
    ) -> None:
        self.source = source
        self.deliver = deliver
        self.stderr = stderr
        self.stale_after = stale_after
        self.stopping = stopping
        self.on_first_data = on_first_data
        self.framer = LineFramer()
        self.got_data = False
        self.last_data = time.monotonic()

    def ended(self) -> str | None:
        """"stopped" or "stale" when the stream ends without another read, else None."""
        if self.stopping():
            return "stopped"
        if time.monotonic() - self.last_data >= self.stale_after:
            return "stale"
        return None

    def wait_limit(self, poll_interval: float) -> float:
        """How long a wait for readiness may last before `ended` must be asked again."""
        return min(poll_interval, self.stale_after - (time.monotonic() - self.last_data))

    def service(self) -> bool:
        """Drain stderr and pass on the stdout that is ready; True once the stream has
        finished (every byte read and the channel or process closed)."""
        source = self.source
        self._drain_err()
        parts: list[bytes] = []
        size = 0
        while size < MAX_READ_BATCH:
            data = source.read_out()
            if not data:
                break
            parts.append(data)
            size += len(data)
        if parts:
            if not self.got_data:
                self.got_data = True
                self.on_first_data()
            self.last_data = time.monotonic()
            chunk = self.framer.feed(b"".join(parts) if len(parts) > 1 else parts[0])
            if chunk:
                self.deliver(chunk)
            return False
        if source.finished():
            self._drain_err()  # what was written between the last look and the close
            return True
        return False

    def _drain_err(self) -> None:
        err = self.source.read_err()
        while err:
            self.stderr.feed(err)
            err = self.source.read_err()

    def result(self, reason: str) -> PumpResult:
        """Why the stream ended. For an end of stream this waits (up to seconds) for the
        exit status: the caller must be the link's own thread, never a shared one. An
        end caused by the link's own stop (it closes the connection) is a stop: no exit
        status will come, and waiting for one only delays the stop."""
        if reason == "eof" and self.stopping():
            reason = "stopped"
        status = self.source.exit_status() if reason == "eof" else None
        return PumpResult(reason, self.got_data, status, self.framer.reset())

    def run_alone(self, poll_interval: float = 1.0) -> PumpResult:
        """Pump on the calling thread until the stream ends, goes stale or `stopping()`
        turns true."""
        poller = select.poll()  # not select: no limit on the descriptors' numbers
        for fd in self.source.filenos():
            poller.register(fd, select.POLLIN)
        while True:
            reason = self.ended()
            if reason is not None:
                return self.result(reason)
            ready = poller.poll(self.wait_limit(poll_interval) * 1000)
            if any(event & select.POLLNVAL for _, event in ready):
                time.sleep(0.05)  # a pipe closed under us: look at it once more, calmly
            if ready and self.service():
                return self.result("eof")
