"""A live session: hosts' agents → transport → store writer → DuckDB → `LiveSource`.

`LiveSession` owns every moving part of a live view and tears them down in the right
order (links first, so nothing arrives after the last flush; then the writer, which
commits what is pending; then the store). `LiveSource` is the UI's side of it and
satisfies the same `Source` protocol as the replay, so the UI has one render path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.analysis.alerts import CRITICAL, RESOURCE, merge
from cockpit.analysis.text import counted
from cockpit.control.acks import ack_outcome
from cockpit.errors import CockpitError
from cockpit.read.compare import Comparison
from cockpit.read.details import DetailKind, Details
from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot, details
from cockpit.snapshot import Alert, Snapshot
from cockpit.store.database import IngestResult, Store, StoreError
from cockpit.store.live_socket import SnapshotServer
from cockpit.store.queries import StoreReader
from cockpit.store.retention import RetentionPolicy, apply_retention
from cockpit.store.writer import StoreWriter, WriterBacklogError
from cockpit.transport.fleet import Fleet
from cockpit.transport.inventory import (
    HostSpec,
    Inventory,
)
from cockpit.transport.link import LinkOptions
from cockpit.transport.states import STREAMING

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# Retention runs this often on the writer thread; the chart levels are re-clustered after
# it, on a thread of their own.
MAINTENANCE_EVERY_S = 3600.0
# Seconds of retention work at a time: flushes wait while it runs. A backlog (an old
# recording watched with a shorter window, or days of a host's journal arriving at once)
# is worked through in parts, with flushes between them.
MAINTENANCE_PART_S = 2.0


class LiveSource:
    """The UI's view of a live session: snapshots built from the store being written."""

    label = "LIVE"

    def __init__(self, session: LiveSession) -> None:
        self._session = session
        self.recording = session.store_path  # the file written (screenshots go next to it)
        self._reader = StoreReader(session.store)
        self.controller: Any = None  # set when a controllable job is attached
        self.focus_job: str | None = None  # the operator's pick among jobs training

    def start(self, on_data: Callable[[], None]) -> None:
        self._session.add_listener(on_data)

    def snapshot(self, buckets: int = SNAPSHOT_BUCKETS) -> Snapshot:
        # A host retrying after a failure shows the failure, not each retry's "connecting".
        states = {name: st.shown()[0] for name, st in self._session.fleet.status().items()}
        snapshot = build_snapshot(
            self._reader,
            until_ts=None,
            label=self.label,
            buckets=buckets,
            host_states=states,
            controllable=self.controller is not None,
            now=time.time(),
            job=self.focus_job,
        )
        alert = self._session.store_alert()
        if alert is None:
            return snapshot
        return replace(snapshot, alerts=merge(snapshot.alerts, [alert]))

    def details(self, what: DetailKind, **kw: Any) -> Details | Comparison:
        return details(self._reader, what, **kw)

    def acks(self, op_ids: Sequence[str]) -> dict[str, tuple[bool, str]]:
        """The stored acknowledgements of `op_ids` (id -> (accepted, what the agent
        said)): an op the screen reported as sent may yet be refused by an agent."""
        return {op_id: ack_outcome(ack)
                for op_id, ack in self._reader.control_acks(list(op_ids)).items()}

    def stop(self) -> None:
        self._session.remove_listeners()


class LiveSession:
    """Streams every host of an inventory into one recording."""

    def __init__(self, hosts: Inventory | Sequence[HostSpec], store_path: Path,
                 options: LinkOptions | None = None,
                 retention: RetentionPolicy | None = None,
                 maintenance_every: float = MAINTENANCE_EVERY_S) -> None:
        self.store_path = Path(store_path)
        self.store_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.store = Store(self.store_path)
        except StoreError as exc:
            raise CockpitError(str(exc)) from None
        self._listeners: list[Callable[[], None]] = []
        self._taps: list[Callable[[str, bytes], None]] = []
        self._lock = threading.Lock()
        self._streamed: set[str] = set()  # hosts whose link has streamed at least once
        self.retention = retention or RetentionPolicy()
        self._clustering: threading.Thread | None = None
        # Writes the recording could not take: how many, the latest while they are still
        # being retried (cleared by the next write that succeeds), and the latest that
        # lost lines for good (kept: the recording has a gap).
        self._store_failures = 0
        self._store_failure: tuple[float, str] | None = None
        self._store_lost: tuple[float, str] | None = None
        self._closed = False
        self.writer = StoreWriter(self.store, on_flush=self._on_flush,
                                  on_error=self._on_store_error,
                                  maintenance=self._maintain,
                                  maintenance_every=maintenance_every,
                                  on_resend=self._resend)
        self.fleet = Fleet(
            hosts,
            high_water=self.writer.high_water,
            on_chunk=self._on_chunk,
            on_state=self._on_state,
            options=options,
        )
        self.source = LiveSource(self)
        # Copies of what is committed for readers in other processes, which DuckDB
        # keeps out of the file while this one writes it (docs/recordings.md).
        self.snapshots = SnapshotServer(self.store)

    def _maintain(self, store: Store) -> bool:
        """Runs on the writer thread, between flushes: lines arriving meanwhile queue.
        True while a backlog is left for the next part (`MAINTENANCE_PART_S` each)."""
        result = apply_retention(store, self.retention, budget_s=MAINTENANCE_PART_S)
        log.info("retention: rolled up %d gpu and %d host samples, deleted %d steps of "
                 "ranks other than 0 and %d log lines%s", result.gpu_rolled,
                 result.host_rolled, result.train_deleted, result.logs_deleted,
                 "" if result.done else "; more left for the next part")
        if not result.done:
            return True  # re-clustered once the backlog is worked through
        if self._clustering is None or not self._clustering.is_alive():
            # A rewrite takes seconds to minutes for a long run: flushes go on meanwhile.
            self._clustering = threading.Thread(target=self._recluster, args=(store,),
                                                name="level-clustering", daemon=True)
            self._clustering.start()
        return False

    def _recluster(self, store: Store) -> None:
        try:
            rewritten = store.recluster_levels()
        except Exception as exc:  # a full disk, say: the next maintenance tries again
            self.writer.on_error(exc)
            return
        log.info("re-clustered %s", ", ".join(rewritten) or "no level table")

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> LiveSession:
        self.writer.start()
        self.snapshots.start()
        self.fleet.start()
        return self

    def stop(self) -> None:
        self.snapshots.stop()  # before the store closes: a copy in progress gives up
        self.fleet.stop()
        self.writer.stop()
        self._closed = True  # a link's late state has nowhere to go now, and is no failure
        self.store.close()  # interrupts a re-clustering in progress
        if self._clustering is not None:
            self._clustering.join()

    def __enter__(self) -> LiveSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _on_store_error(self, exc: Exception) -> None:
        """The writer thread's failures (a full disk, dropped lines): nothing else shows
        them while the UI runs, so they are kept for the screen and the headless exit."""
        log.error("store writer: %s", exc)
        failure = (time.time(), f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._store_failures += 1
            if isinstance(exc, WriterBacklogError):
                self._store_lost = failure
            else:
                self._store_failure = failure
        self._notify()

    def _store_failed(self) -> tuple[float, str] | None:
        """(the time of the latest failed write, what went wrong so far), or None once
        the failed writes went in on retry and nothing was given up."""
        with self._lock:
            failures, lost, pending = (self._store_failures, self._store_lost,
                                       self._store_failure)
        latest = lost or pending
        if latest is None:
            return None
        text = (f"writing {self.store_path} failed {counted(failures, 'time')}; "
                f"latest: {latest[1]}")
        if lost is not None and pending is not None:
            text += f"; still failing: {pending[1]}"
        return (pending or latest)[0], text

    def store_problem(self) -> str | None:
        """What went wrong writing the recording, or None: what a headless run must not
        hide either."""
        failed = self._store_failed()
        return failed[1] if failed else None

    def store_alert(self) -> Alert | None:
        """The store's failures as an alert: the recording, and so the screen, may be
        missing what the hosts sent."""
        failed = self._store_failed()
        if failed is None:
            return None
        return Alert(ts=failed[0], kind=RESOURCE, severity=CRITICAL, code="store-write",
                     where=f"recording {self.store_path}", what=failed[1],
                     hint="free space on the recording's disk (or check its permissions); "
                          "queued lines are retried, and past the backlog limit dropped")

    def link_problems(self) -> dict[str, str]:
        """Hosts whose link failed and did not recover (lost, or never connected: still
        trying counts, as a slow refusal must not pass for a host that delivered), each
        with its state and reason: what a headless run must not hide."""
        with self._lock:
            streamed = set(self._streamed)
        problems = {}
        for name, status in self.fleet.status().items():
            if status.failed or (name not in streamed and status.state != STREAMING):
                state, detail = status.shown()
                problems[name] = state + (f": {detail}" if detail else "")
        return problems

    def record_for(self, seconds: float, done: Callable[[], bool] | None = None) -> None:
        """Headless recording (no UI) for `seconds`, or until `done()` (asked about once
        a second) says there is nothing more to record; then a final flush."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            if done is not None and done():
                break
        self.writer.flush()

    # -- listeners ------------------------------------------------------------------

    def add_listener(self, fn: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(fn)

    def remove_listeners(self) -> None:
        with self._lock:
            self._listeners.clear()

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            fn()

    def _on_flush(self, result: IngestResult) -> None:
        # A host whose agent journal was reset (its state dir wiped, say) is re-keyed by
        # the store; its stream must restart from seq 0 to fetch the new journal whole.
        for host in result.journal_resets:
            if host in self.fleet.links:
                self.fleet.links[host].reconnect()
        with self._lock:
            self._store_failure = None  # the queued lines went in with this flush
        self._notify()

    def _resend(self, host: str) -> None:
        """The writer gave up a host's queued lines: its stream restarts from the mark."""
        if host in self.fleet.links:
            self.fleet.links[host].reconnect()

    def add_chunk_tap(self, fn: Callable[[str, bytes], None]) -> None:
        """`fn(host, chunk)` sees every chunk before it is stored, on the thread that
        reads the stream (for SSH links one thread reads them all, so `fn` must not
        wait): for what a command needs from the stream itself (its header) before any
        flush. Add taps before `start`."""
        self._taps.append(fn)

    def _on_chunk(self, host: str, chunk: bytes) -> None:
        for tap in self._taps:
            tap(host, chunk)
        self.writer.put(host, chunk)

    def _on_state(self, host: str, state: str, detail: str) -> None:
        if state == STREAMING:
            with self._lock:
                self._streamed.add(host)
        if self._closed:
            return
        try:
            self.store.set_host_state(host, state, detail)
        except Exception as exc:  # a full disk, say: the link goes on, the screen says so
            self._on_store_error(exc)
            return
        self._notify()
