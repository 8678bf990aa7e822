"""One writer thread between many transport threads and the store.

Transport threads call `put(host, chunk)` and return at once; the writer commits what
has accumulated every `interval` seconds (0.5 s by default) or sooner when `max_lines`
lines are waiting. Under load a flush takes everything that arrived while the previous
one ran, so the fixed cost of a transaction is spread over more lines exactly when
throughput matters.

A flush has a cost that grows with the number of series it touches rather than with its
lines (every chart level of every GPU of a fleet is updated, `cockpit.store.levels`), so
when flushes get expensive the writer waits longer between them: at least
`quiet_factor` (10) times the last flush's duration, but never more than `max_interval`
(1 s), so data is still never much more than a second from disk. A full buffer
(`max_lines`) is flushed at once whatever the last flush cost.

`on_flush(result)` runs on the writer thread after each commit that stored or rejected
something; the live UI uses it as its "data arrived" signal. `on_error(exc)` gets
failures of a flush (a full disk, say). A failed batch is kept and retried with the next
flush, because later seqs from the same host would otherwise raise its high-water mark
past the failed range and it would never be asked for again; only when the backlog
passes `max_backlog_lines` is the oldest batch given up, and that is reported as a
`WriterBacklogError`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cockpit.ingest.route import Grouped, pregroup
from cockpit.store.database import IngestResult, Store

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5
DEFAULT_MAX_LINES = 20_000
DEFAULT_MAX_INTERVAL = 1.0
DEFAULT_QUIET_FACTOR = 10.0  # idle time per unit of flush time: flushing stays <= ~10 %
# Lines grouped ahead of a flush take about twice their wire size again in memory: past
# this much queued wire data (the store is failing, or far behind) chunks queue as they
# came and the flush routes them.
PREGROUP_MAX_PENDING_BYTES = 256 << 20


class WriterBacklogError(RuntimeError):
    """The store kept failing and queued lines had to be dropped."""


class StoreWriter:
    def __init__(
        self,
        store: Store,
        on_flush: Callable[[IngestResult], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        interval: float = DEFAULT_INTERVAL,
        max_lines: int = DEFAULT_MAX_LINES,
        maintenance: Callable[[Store], bool | None] | None = None,
        maintenance_every: float = 3600.0,
        max_backlog_lines: int = 2_000_000,
        max_interval: float = DEFAULT_MAX_INTERVAL,
        quiet_factor: float = DEFAULT_QUIET_FACTOR,
    ) -> None:
        self.store = store
        self.on_flush = on_flush
        self.on_error = on_error or self._log_error
        self.interval = interval
        self.max_lines = max_lines
        self.maintenance = maintenance
        self.maintenance_every = maintenance_every
        self.max_backlog_lines = max_backlog_lines
        self.max_interval = max(max_interval, interval)
        self.quiet_factor = quiet_factor
        self._last_flush_s = 0.0
        self._pending: list[tuple[str, bytes, Grouped | None]] = []
        self._lines = 0
        self._pending_bytes = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.flushes = 0
        self.errors = 0

    def start(self) -> StoreWriter:
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._thread.start()
        return self

    def put(self, host: str, chunk: bytes) -> None:
        """Queue complete lines from `host` (thread-safe, never blocks on the store).

        The lines are grouped by record type here, on the caller's (transport) thread,
        so that this Python work overlaps the writer's DuckDB work (which releases the
        GIL) instead of adding to it: the writer's thread is what limits ingest.
        """
        if not chunk:
            return
        grouped = None
        if self._pending_bytes < PREGROUP_MAX_PENDING_BYTES:
            try:
                grouped = pregroup(chunk)
            except Exception as exc:  # the flush routes the chunk, and reports any fault
                log.warning("store writer: grouping a chunk from %s ahead failed: %s",
                            host, exc)
        lines = chunk.count(b"\n")
        with self._cond:
            self._pending.append((host, chunk, grouped))
            self._lines += lines
            self._pending_bytes += len(chunk)
            if self._lines >= self.max_lines:
                self._cond.notify()

    @property
    def backlog_lines(self) -> int:
        """Lines queued and not yet committed (a store that keeps up holds about one
        flush interval's worth)."""
        with self._cond:
            return self._lines

    def high_water(self, host: str) -> int:
        """The committed mark: what a reconnect must ask for."""
        return self.store.high_water(host)

    def flush(self) -> IngestResult | None:
        """Commit what is queued now, on the calling thread (tests, shutdown)."""
        with self._cond:
            batch, self._pending, self._lines = self._pending, [], 0
            self._pending_bytes = 0
        return self._commit(batch)

    def next_wait(self) -> float:
        """Seconds the writer thread lets lines gather before its next flush."""
        return min(max(self.interval, self.quiet_factor * self._last_flush_s),
                   self.max_interval)

    def stop(self, timeout: float = 10.0) -> None:
        """Flush what is queued and end the writer thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        next_maintenance = time.monotonic() + self.maintenance_every
        while True:
            with self._cond:
                deadline = time.monotonic() + self.next_wait()
                while not self._stopping and self._lines < self.max_lines:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending, self._lines = self._pending, [], 0
                self._pending_bytes = 0
                stopping = self._stopping
            started = time.monotonic()
            self._commit(batch)
            self._last_flush_s = time.monotonic() - started if batch else 0.0
            if self.maintenance is not None and time.monotonic() >= next_maintenance:
                more = self._guarded(self.maintenance, self.store)
                # Work left (a long backlog, done in parts): the next part right after
                # the next flush, so that ingest is never held up for long.
                next_maintenance = time.monotonic() + (0.0 if more is True
                                                       else self.maintenance_every)
            if stopping:
                return

    def _commit(self, batch: list[tuple[str, bytes, Grouped | None]]) -> IngestResult | None:
        if not batch:
            return None
        try:
            result = self.store.ingest_many(batch)
        except Exception as exc:
            self.errors += 1
            self.on_error(exc)
            self._requeue(batch)
            return None
        self.flushes += 1
        if self.on_flush is not None and (result.stored or result.malformed
                                          or result.journal_resets):
            self._guarded(self.on_flush, result)
        return result

    def _requeue(self, batch: list[tuple[str, bytes, Grouped | None]]) -> None:
        lines = sum(chunk.count(b"\n") for _, chunk, _ in batch)
        with self._cond:
            if self._lines + lines > self.max_backlog_lines:
                hosts = sorted({host for host, _, _ in batch})
                self.on_error(WriterBacklogError(
                    f"the store kept failing; dropped {lines} queued lines from "
                    f"{', '.join(hosts)} (backlog limit {self.max_backlog_lines} lines)"
                ))
                return
            # Queued as they came: a backlog must not also hold every line grouped.
            self._pending[:0] = [(host, chunk, None) for host, chunk, _ in batch]
            self._lines += lines
            self._pending_bytes += sum(len(chunk) for _, chunk, _ in batch)

    @staticmethod
    def _log_error(exc: Exception) -> None:
        log.error("store writer: %s", exc, exc_info=exc)

    def _guarded(self, fn: Callable[..., object], arg: object) -> object:
        try:
            return fn(arg)
        except Exception as exc:
            self.errors += 1
            self.on_error(exc)
            return None
