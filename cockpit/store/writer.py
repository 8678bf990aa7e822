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
past the failed range and it would never be asked for again. When the backlog passes
`max_backlog_lines` the oldest batch is given up, reported as a `WriterBacklogError`,
and so is everything queued after it from the same hosts, until each host's stream
restarts from its committed mark (`on_resend(host)` asks for that; the writer takes the
host's lines again from a stream header that starts at or below the mark): a mark never
moves past lines that were dropped, so they are fetched again rather than lost.

A host whose lines fail even when the store takes each host alone (`Store.ingest_many`
reports it in `IngestResult.failed`) costs only itself: its lines are kept and retried,
each flush in a transaction of their own, while every other host's lines are stored.
The store's own failure (`store_failure`: a full disk, a read-only file system) is no
host's: it is reported as it is, and the whole batch kept for the next flush.

The writer thread outlives any unexpected failure of one of its iterations: the batch
it took is queued again at the front, the failure reported (`WriterFaultError`) through
`on_error`, and the next flush waits a back-off that doubles while failures repeat
(`BACKOFF_MIN_S` .. `BACKOFF_MAX_S`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import orjson

from agent.wire.protocol import STREAM_HEADER
from cockpit.ingest.route import Grouped, pregroup
from cockpit.store.database import IngestResult, Store, merge_results, store_failure

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5
DEFAULT_MAX_LINES = 20_000
DEFAULT_MAX_INTERVAL = 1.0
DEFAULT_QUIET_FACTOR = 10.0  # idle time per unit of flush time: flushing stays <= ~10 %
# Lines grouped ahead of a flush take about twice their wire size again in memory: past
# this much queued wire data (the store is failing, or far behind) chunks queue as they
# came and the flush routes them.
PREGROUP_MAX_PENDING_BYTES = 256 << 20
# After a writer-thread iteration failed unexpectedly (a fault of the writer itself, not
# a store failure, which `_commit` handles): the wait before the next, doubled per
# failure in a row up to the cap, so that a fault that repeats does not spin.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0

# How a stream header's line starts: `agent.wire.protocol.encode` writes `t` first.
_STREAM_START = b'{"t":"' + STREAM_HEADER.encode() + b'"'


class WriterBacklogError(RuntimeError):
    """The store kept failing and queued lines had to be dropped."""


class HostStoreError(RuntimeError):
    """One host's lines could not be stored while other hosts' were."""


class WriterFaultError(RuntimeError):
    """A flush of the writer thread failed in an unexpected way; its lines are kept."""


Entry = tuple[str, bytes, Grouped | None]


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
        on_resend: Callable[[str], None] | None = None,
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
        self._pending: list[Entry] = []
        self._lines = 0
        self._pending_bytes = 0
        self._cond = threading.Condition()
        # Held from taking a batch until it is committed (`flush`, the writer thread);
        # never taken while `_cond` is held.
        self._committing = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.flushes = 0
        self.errors = 0
        self.on_resend = on_resend
        # Hosts whose queued lines were given up: their lines are refused until a stream
        # header from at most their mark (`_takes`); and those still to be asked for that.
        self._gapped: set[str] = set()
        self._resend: set[str] = set()
        self._suspects: set[str] = set()  # hosts that failed alone: stored on their own
        self.discarded_lines = 0  # lines of gapped hosts refused (fetched again later)

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
        with self._cond:  # (a gap is opened under this lock: checked under it too)
            if host in self._gapped and not self._takes(host, chunk):
                self.discarded_lines += lines
                return
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
        """Commit what is queued now, on the calling thread (an operation's wait for its
        acknowledgements, a headless recording's end). It waits for a commit the writer
        thread has under way: a later batch committed first would move the hosts' marks
        past the earlier one's lines, which would then be dropped as already stored."""
        with self._committing:
            return self._commit_kept(self._take())

    def _take(self) -> list[Entry]:
        with self._cond:
            batch, self._pending, self._lines = self._pending, [], 0
            self._pending_bytes = 0
        return batch

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
        backoff = 0.0  # after an iteration that failed: no flush sooner, full buffer or not
        while True:
            with self._cond:
                deadline = time.monotonic() + max(self.next_wait(), backoff)
                while not self._stopping and (backoff or self._lines < self.max_lines):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                stopping = self._stopping
            try:
                with self._committing:  # batches are committed in the order they are taken
                    batch = self._take()
                    started = time.monotonic()
                    self._commit_kept(batch)
                    self._last_flush_s = time.monotonic() - started if batch else 0.0
                if self.maintenance is not None and time.monotonic() >= next_maintenance:
                    more = self._guarded(self.maintenance, self.store)
                    # Work left (a long backlog, done in parts): the next part right after
                    # the next flush, so that ingest is never held up for long.
                    next_maintenance = time.monotonic() + (0.0 if more is True
                                                           else self.maintenance_every)
                backoff = 0.0
            except Exception as exc:  # the thread outlives it: the lines are kept
                backoff = min(max(2 * backoff, BACKOFF_MIN_S), BACKOFF_MAX_S)
                self.errors += 1
                fault = WriterFaultError(
                    f"a flush failed unexpectedly ({type(exc).__name__}: {exc}); its lines "
                    f"are kept and tried again in {backoff:g} s")
                fault.__cause__ = exc
                self._report(fault)
            if stopping:
                return

    def _commit_kept(self, batch: list[Entry]) -> IngestResult | None:
        """`_commit`, with `batch` queued again at the front should it raise (lines of it
        that were committed come back as duplicates, which the store skips)."""
        try:
            return self._commit(batch)
        except BaseException:
            self._requeue(batch)
            raise

    def _takes(self, host: str, chunk: bytes) -> bool:
        """Whether a chunk of a gapped host starts a stream from at most its committed
        mark (which then ends the gap): the restart `on_resend` asked for, or any other
        reconnect, which also asks from the mark."""
        if not chunk.startswith(_STREAM_START):
            return False
        try:
            header = orjson.loads(chunk.split(b"\n", 1)[0])
        except orjson.JSONDecodeError:
            return False
        start = header.get("from") if isinstance(header, dict) else None
        if not isinstance(start, int) or isinstance(start, bool):
            return False
        if start > self.store.high_water(host):
            return False
        self._gapped.discard(host)
        return True

    def _commit(self, batch: list[Entry]) -> IngestResult | None:
        """Store `batch`: the suspects' lines each in a flush of their own, the rest in
        one; what fails is queued again. What was stored, or None when nothing was."""
        self._ask_resend()
        if not batch:
            return None
        parts = [[e for e in batch if e[0] not in self._suspects]]
        parts += [[e for e in batch if e[0] == host]
                  for host in sorted({e[0] for e in batch} & self._suspects)]
        retry: set[int] = set()  # ids of the entries to queue again
        results: list[IngestResult] = []
        for index, part in enumerate(parts):
            if not part:
                continue
            try:
                result = self.store.ingest_many(part)
            except Exception as exc:
                self.errors += 1
                host = part[0][0]
                if store_failure(exc):
                    # The store's own (a full disk): said as such, no host blamed, and
                    # no other part tried (it would fail the same way); all kept.
                    self._report(exc)
                    retry.update(id(e) for rest in parts[index:] for e in rest)
                    break
                if host in self._suspects:
                    exc = HostStoreError(f"host {host}: its lines still cannot be stored "
                                         f"({type(exc).__name__}: {exc}); kept and retried")
                self._report(exc)
                retry.update(id(e) for e in part)
                continue
            failed = dict(result.failed)
            for host, error in failed.items():
                self.errors += 1
                self._suspects.add(host)
                self._report(HostStoreError(
                    f"host {host}: its lines could not be stored ({error}); they are kept "
                    "and retried on their own, the other hosts' lines were stored"))
            retry.update(id(e) for e in part if e[0] in failed)
            self._suspects -= {e[0] for e in part} - set(failed)
            self.flushes += 1
            results.append(result)
            if self.on_flush is not None and (result.stored or result.malformed
                                              or result.journal_resets):
                self._guarded(self.on_flush, result)
        if retry:
            self._requeue([e for e in batch if id(e) in retry])
        self._ask_resend()
        return merge_results(results) if results else None

    def _ask_resend(self) -> None:
        if not self._resend:
            return
        with self._cond:
            hosts, self._resend = sorted(self._resend), set()
        for host in hosts:
            if self.on_resend is not None:
                self._guarded(self.on_resend, host)

    def _requeue(self, batch: list[Entry]) -> None:
        lines = sum(chunk.count(b"\n") for _, chunk, _ in batch)
        with self._cond:
            if self._lines + lines > self.max_backlog_lines:
                hosts = {host for host, _, _ in batch}
                # What came after the dropped lines would move the marks past them.
                later = [e for e in self._pending if e[0] in hosts]
                self._pending = [e for e in self._pending if e[0] not in hosts]
                later_lines = sum(chunk.count(b"\n") for _, chunk, _ in later)
                self._lines -= later_lines
                self._pending_bytes -= sum(len(chunk) for _, chunk, _ in later)
                self._gapped |= hosts
                self._resend |= hosts
                self.discarded_lines += lines + later_lines
                error = WriterBacklogError(
                    f"the store kept failing; dropped {lines + later_lines} queued lines "
                    f"from {', '.join(sorted(hosts))} (backlog limit "
                    f"{self.max_backlog_lines} lines); their streams restart from the "
                    "recording's mark to send them again")
            else:
                error = None
                # Queued as they came: a backlog must not also hold every line grouped.
                self._pending[:0] = [(host, chunk, None) for host, chunk, _ in batch]
                self._lines += lines
                self._pending_bytes += sum(len(chunk) for _, chunk, _ in batch)
        if error is not None:
            self._report(error)

    @staticmethod
    def _log_error(exc: Exception) -> None:
        log.error("store writer: %s", exc, exc_info=exc)

    def _report(self, exc: Exception) -> None:
        """`on_error(exc)`; a fault of `on_error` itself is logged, never raised into
        the flush (which would lose track of the lines it has to keep)."""
        try:
            self.on_error(exc)
        except Exception as fault:
            log.error("store writer: reporting %s failed: %s", exc, fault, exc_info=fault)

    def _guarded(self, fn: Callable[..., object], arg: object) -> object:
        try:
            return fn(arg)
        except Exception as exc:
            self.errors += 1
            self._report(exc)
            return None

