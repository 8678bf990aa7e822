"""One thread that reads the agent streams of every SSH link.

A link waiting on its own stream wakes for every message: at 1 Hz from 256 hosts that
is 256 thread wake-ups a second, each a few syscalls and a handover of the GIL, on top
of paramiko's own thread per connection. One thread waiting on all streams at once is
woken once for every host that sent in the same instant (agents sample on the second),
and serves them in turn. Measured on 256 real sshd channels fed at 1 Hz: 0.12 of a core
read by 256 threads, 0.074 by one.

A link still owns its stream: it connects, hands the source here, and waits until the
stream ends (`SharedReader.run`, the same contract as `StreamPump.run_alone`). It
records on its own thread that the stream is up, and after the end it reads the exit
status and reconnects there too, so nothing that can wait (the store, the network) runs
on this one. What the consumer raises ends that stream only, and is raised again on the
link's thread.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from dataclasses import dataclass, field

from cockpit.transport.pump import PumpResult, StreamPump

log = logging.getLogger(__name__)

POLL_INTERVAL = 1.0  # s: how often stops and silence are checked while nothing arrives


@dataclass(eq=False)
class _Entry:
    stream: StreamPump
    # Set for the link's thread when its stream has ended or has sent its first data.
    wake: threading.Event = field(default_factory=threading.Event)
    first_data: bool = False
    ended: bool = False
    reason: str = ""
    error: BaseException | None = None


class SharedReader:
    """Pumps the streams handed to it on one thread, started with the first stream."""

    def __init__(self, poll_interval: float = POLL_INTERVAL) -> None:
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._thread: threading.Thread | None = None
        self.rounds = 0  # waits so far: a reader that spins instead of waiting shows here
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    def run(self, stream: StreamPump) -> PumpResult:
        """`StreamPump.run_alone`, with the reading done on this reader's thread while the
        calling link's thread waits for the end.

        The stream's `on_first_data` runs on the link's thread, as it would alone: it
        records the link's state in the store, which may wait for a flush, and must not
        hold up every other host's stream meanwhile."""
        entry = _Entry(stream)
        on_first_data, stream.on_first_data = stream.on_first_data, lambda: self._first(entry)
        with self._lock:
            self._entries.append(entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ssh-reader",
                                                daemon=True)
                self._thread.start()
        self._wake()
        while True:
            entry.wake.wait()
            entry.wake.clear()  # the flags are read after: a wake set meanwhile is seen
            if entry.first_data:
                entry.first_data = False
                on_first_data()
            if entry.ended:
                break
        if entry.error is not None:
            raise entry.error
        return stream.result(entry.reason)

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"x")
        except BlockingIOError:  # already woken, and not yet drained
            pass

    def _finish(self, entry: _Entry, reason: str, error: BaseException | None = None) -> None:
        with self._lock:
            self._entries.remove(entry)
        entry.reason, entry.error = reason, error
        entry.ended = True
        entry.wake.set()

    @staticmethod
    def _first(entry: _Entry) -> None:
        entry.first_data = True
        entry.wake.set()

    def _run(self) -> None:
        while True:
            try:
                self._round()
            except Exception as exc:  # a fault here must not leave every link waiting
                log.error("shared SSH reader: %s: %s", type(exc).__name__, exc)
                with self._lock:
                    entries = list(self._entries)
                for entry in entries:
                    self._finish(entry, "stopped", exc)

    def _round(self) -> None:
        """Wait until a stream has something or one must be checked, and serve it."""
        self.rounds += 1
        with self._lock:
            entries = list(self._entries)
        owners: dict[int, _Entry] = {}
        timeout: float | None = None if not entries else self.poll_interval
        for entry in entries:
            reason = entry.stream.ended()
            if reason is not None:
                self._finish(entry, reason)
                continue
            limit = max(0.0, entry.stream.wait_limit(self.poll_interval))
            timeout = limit if timeout is None else min(timeout, limit)
            for fd in entry.stream.source.filenos():
                owners[fd] = entry
        # poll, not select: a fleet's descriptors run past select's limit of 1024.
        poller = select.poll()
        for fd in (self._wake_read, *owners):
            poller.register(fd, select.POLLIN)
        # A closed pipe reports POLLNVAL or POLLHUP: its stream gets one more look,
        # which finds it finished (as `StreamPump.run_alone` does).
        ready = [fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)]
        if self._wake_read in ready:
            self._drain_wake()
        served: set[int] = set()
        for fd in ready:
            owner = owners.get(fd)
            if owner is None or id(owner) in served:
                continue
            served.add(id(owner))
            try:
                if owner.stream.service():
                    self._finish(owner, "eof")
            except Exception as exc:  # the consumer's, or the source's: that stream ends
                self._finish(owner, "stopped", exc)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass


_shared: SharedReader | None = None
_shared_lock = threading.Lock()


def shared_reader() -> SharedReader:
    """The process's reader, which every SSH link's stream goes through."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SharedReader()
        return _shared


def read_shared(stream: StreamPump) -> PumpResult:
    """Pump `stream` on the process's shared reader."""
    return shared_reader().run(stream)
