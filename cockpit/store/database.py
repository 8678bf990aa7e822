"""The recording: one DuckDB file, its migrations, and every write to it.

One `Store` holds one DuckDB connection; each operation takes a fresh `cursor()` (its
own DuckDB connection to the same database), which is how DuckDB is used safely from
several threads. Writes are serialised by a lock: one process, one writer thread in it
(`cockpit.store.writer.StoreWriter`), while readers work concurrently on cursors.

A flush (`ingest_many`) routes every host's lines first (or takes them as the writer's
callers already grouped them, `cockpit.ingest.route.pregroup`) and then loads each record
type once for all hosts (`cockpit.store.loader`), because a load has a fixed cost of
several milliseconds: per host and type, a fleet of hundreds of hosts spent its whole
flush interval on them.

Ingest keeps, per host, the highest committed seq (`high_water`) in memory and in
`hosts.high_water`; a line is stored only if its seq is above it. This relies on the
agent streaming each host's seqs in increasing order (docs/protocol.md), which makes a
resent range, or a chunk that straddles the mark, cheap to drop. The in-memory marks
change only after the transaction that stored the lines commits, so `high_water()` is
always what a reconnect may safely ask `--from`.

A stream header with a different `journal_id` than the stored one means the host's
journal was reset (its state dir wiped): its seqs start again from 1. The store then
shifts the seqs it stores for the new journal by `hosts.seq_offset` (the highest seq
stored so far), so (host, seq) stays unique, resets `high_water` to 0, records the
reset in `wire_errors` and `hosts.last_error`. A header that starts the new journal
from its first record (an agent's stream that saw the journal replaced under it sends
one) needs nothing more. One that starts it from the old journal's mark (a stream that
connected after the reset, asked `--from` that mark) skipped the new journal's first
records: the host is then reported in `IngestResult.journal_resets`, and its stream
must be restarted from 0 to get them.

What a host sends is untrusted (`cockpit.ingest.bounds`): seqs, times and steps out of
range make their records malformed, a stream header's `from` past what this store holds
of the journal is refused, and a flush that fails even line by line is retried host by
host, so one host's data never fails or rolls back another's (`IngestResult.failed`).

Unknown fields can only come from an agent newer than this code (the protocol defines
every field of a version), so the check for them, which costs as much as the insert,
runs for hosts whose stream header announced a newer protocol or that sent no header;
`check_fields="always"` runs it for every line. A line with unknown fields is stored
typed as usual and also copied whole into `other` with `t` = "<type>+extra".

(A long module: every write to the recording goes through one lock and one set of
in-memory marks, which must change only with the commits that move them.)
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import psutil

from agent.wire.protocol import PROTOCOL_VERSION
from cockpit.ingest.bounds import OFFSET_MAX, SEQ_MAX, seq_ok
from cockpit.ingest.route import Grouped, Malformed, merge_grouped, route_chunk, split_chunk
from cockpit.store import schema
from cockpit.store.earlier_runs import (
    Filing,
    file_earlier_run,
    fresh_starts,
    load_filings,
    rename_earlier_rows,
    start_lines,
    steps_before,
)
from cockpit.store.levels import (
    CLUSTER_MIN_NEW_ROWS,
    clustered_copy,
    copy_clustered,
    defer_levels,
    defer_staged,
    fold_pending,
    fold_staged,
    swap_clustered,
    update_levels,
)
from cockpit.store.loader import Piece, Scratch, TypeLoad, load_type
from cockpit.store.versions import TableVersions, Versions, versions_for

# Folding new rows into the level tables costs about the same for 1 row as for 10 k (it
# rewrites the open bucket of every series at every level: 28 k rows for a fleet of 2 k
# GPUs), so the store folds at most this often and parks rows in between, or sooner
# when this many rows of a table are parked. Chart queries read the parked rows raw
# (`cockpit.store.downsample`), which stays cheap while they are this few. For a fleet
# of 256 hosts x 8 GPUs at 1 Hz a fold costs ~0.3 s of CPU whatever it holds, so folding
# every 15 s rather than every 5 s takes a quarter off the writer's CPU (0.17 -> 0.13 of
# a core), while a GPU chart that reads 15 s of parked rows instead of 5 s takes ~3 ms
# longer (11 -> 14 ms; measured on the same store).
FOLD_INTERVAL = 15.0
FOLD_MAX_PENDING = 50_000
WRITER_THREADS = 1
# DuckDB checkpoints (rewrites the changed row groups into the main file) in the commit
# that takes the write-ahead log past this size. Its default (16 MB) checkpoints a busy
# writer several times a minute; at 64 MB a bulk load costs 5-10 % less in all (measured:
# 300 k wire records, final checkpoint included), and at most this much of the recording
# waits in the log, which a restart after a crash replays.
CHECKPOINT_THRESHOLD = "64MB"
# DuckDB keeps the blocks it reads and writes in a buffer pool that may grow to 80 % of
# the machine's memory, and never hands them back: a cockpit left open for days on a
# small debug VM, whose hourly maintenance reads whole tables, would end up holding
# gigabytes it no longer needs. The writer's pool is capped instead (a quarter of a
# small machine's memory); what needs more (re-clustering a month of chart levels,
# rolling up old samples) spills to DuckDB's temp dir beside the recording. Ingest and
# chart queries run as fast at 128 MB; `bench/memory.py` measures the cap's effect.
WRITER_MEMORY_MAX = 512 << 20
WIRE_ERROR_SAMPLES_PER_HOST = 100  # malformed lines kept per host; all are counted
_SAMPLE_BYTES = 1000


def writer_memory_limit(total: int | None = None) -> int:
    """Bytes the writer's DuckDB may hold: WRITER_MEMORY_MAX, or a quarter of a machine
    with less than 2 GiB (`total`: its memory; None: this machine's)."""
    total = psutil.virtual_memory().total if total is None else total
    return min(WRITER_MEMORY_MAX, total // 4)


@contextlib.contextmanager
def _transaction(cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN .. COMMIT on `cur`; on any failure ROLLBACK, so a failed write leaves no
    trace (a rollback that fails too must not hide the first error)."""
    cur.execute("BEGIN")
    with _transaction_end(cur):
        yield


@contextlib.contextmanager
def _transaction_end(cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """COMMIT the transaction already begun on `cur`, or ROLLBACK it on any failure."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")


class StoreError(Exception):
    """A recording cannot be opened or written; the message says what to do."""


class StoreVersionError(StoreError):
    pass


class StoreLockedError(StoreError):
    pass


class StoreDamagedError(StoreError):
    """The file is a DuckDB database whose pages cannot all be read (cut short by a copy
    or a full disk, or overwritten)."""


_MAGIC = {b"\x1f\x8b": "gzip-compressed", b"PK": "a zip archive", b"SQLite": "an SQLite database",
          b"{": "JSON text", b"PAR1": "a Parquet file"}


def _check_duckdb_header(path: Path) -> None:
    """A DuckDB file says DUCK at byte 8. Anything else is named for what it looks like,
    where DuckDB's own error would be about catalogs or in-memory databases."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return  # DuckDB's open says why
    if not head:
        raise StoreError(f"{path} is an empty file (0 bytes), not a recording: replay and "
                         "report read the .duckdb file a watch or demo wrote")
    if len(head) < 12 or head[8:12] == b"DUCK":
        return
    kind = next((name for magic, name in _MAGIC.items() if head.startswith(magic)), None)
    raise StoreError(f"{path} is not a DuckDB recording" + (f": it is {kind}" if kind else "")
                     + (" (wire records, perhaps: replay and report read the .duckdb file "
                        "a watch or demo wrote)" if kind in ("gzip-compressed", "JSON text")
                        else ""))


def unreadable(exc: Exception) -> bool:
    """DuckDB reports a page it cannot read (cut short) as an IOException, but one whose
    checksum or encoding is wrong (overwritten) as a plain Error saying "Corrupt":
    either way the file is damaged, not the statement wrong."""
    return isinstance(exc, duckdb.IOException) or "corrupt" in str(exc).lower()


def damaged(path: Path, exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"the recording {path} is damaged or truncated: DuckDB cannot read it "
            f"({first}). If it was copied while a cockpit wrote it, copy it again together "
            f"with its {path.name}.wal once that cockpit has quit.")


class StoreReadOnlyError(StoreError):
    pass


# What DuckDB (or the OS under it) says when the recording's file, its write-ahead log
# or its temp dir cannot be written: a full disk, a file system remounted read-only.
_STORE_FAILURE_WORDS = ("no space left", "could not write", "disk full", "disk is full",
                        "read-only file system", "read-only", "read only", "could not fsync",
                        "could not truncate", "has been invalidated", "quota exceeded")
# A commit refused for what the transaction wrote is the data's fault, not the store's.
_DATA_COMMIT_WORDS = ("constraint", "duplicate key", "conflict")


def store_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised writing a flush, is the store's own failure (a full disk, a
    read-only or vanished file system, a database DuckDB gave up on) rather than a fault
    of the lines written: no host's lines would fare better alone, so none is blamed.

    DuckDB 2.0 reports a write-ahead log it cannot write as a TransactionException
    ("Failed to commit: Could not write file ...wal: No space left on device"), not an
    IOException. Messages are read only from the exception types that report on the
    database or a transaction: a conversion or parse error may quote a host's line, and
    a line saying "No space left" must not stall every host's flush."""
    if isinstance(exc, (OSError, duckdb.IOException, duckdb.FatalException)):
        return True
    if not isinstance(exc, (duckdb.TransactionException, duckdb.PermissionException)) \
            and type(exc) is not duckdb.Error:
        return False
    text = str(exc).lower()
    if any(word in text for word in _STORE_FAILURE_WORDS):
        return True
    return (isinstance(exc, duckdb.TransactionException) and "failed to commit" in text
            and not any(word in text for word in _DATA_COMMIT_WORDS))


@dataclass(frozen=True)
class IngestResult:
    """What one ingest (or one writer flush) did."""

    stored: int = 0
    duplicates: int = 0
    malformed: int = 0
    max_seq: int = 0  # highest committed seq of the (last) host, in the agent's numbering
    by_type: dict[str, int] = field(default_factory=dict)
    by_host: dict[str, int] = field(default_factory=dict)  # lines stored per host
    # hosts whose stream skipped records of a new journal: it must restart from 0
    journal_resets: tuple[str, ...] = ()
    # (job, the name its earlier run was filed under) for each job launched afresh over
    # an earlier run (`cockpit.store.earlier_runs`).
    filed_runs: tuple[tuple[str, str], ...] = ()
    # (host, error) of each host whose lines could not be stored while the others' were
    # (`Store.ingest_many`): nothing of it was written and its mark did not move.
    failed: tuple[tuple[str, str], ...] = ()


def merge_results(results: list[IngestResult]) -> IngestResult:
    """Several flushes' results (one per host, or per group of hosts) as one."""
    by_type: Counter[str] = Counter()
    for result in results:
        by_type.update(result.by_type)
    return IngestResult(
        stored=sum(r.stored for r in results),
        duplicates=sum(r.duplicates for r in results),
        malformed=sum(r.malformed for r in results),
        max_seq=results[-1].max_seq if results else 0,
        by_type=dict(by_type),
        by_host={h: n for r in results for h, n in r.by_host.items()},
        journal_resets=tuple(h for r in results for h in r.journal_resets),
        filed_runs=tuple(f for r in results for f in r.filed_runs),
        failed=tuple(f for r in results for f in r.failed),
    )


@dataclass(frozen=True)
class HostRow:
    host: str
    address: str | None
    state: str | None
    detail: str | None
    state_ts: float | None
    journal_id: str | None
    high_water: int
    malformed: int
    lost: int
    last_error: str | None
    seq_offset: int


@dataclass
class _HostMark:
    """Per-host ingest bookkeeping, as committed (copied and changed during a flush)."""

    high_water: int = 0
    journal_id: str | None = None
    seq_offset: int = 0
    protocol: int | None = None  # from the latest stream header this session
    samples: int = 0  # wire_errors rows kept
    malformed: int = 0  # added in the current flush
    lost: int = 0  # added in the current flush
    notes: list[tuple[str, str]] = field(default_factory=list)  # (error, sample)
    segment_offsets: list[int] = field(default_factory=list)
    reset: bool = False
    touched: bool = False


class _HostBatch:
    """One host's chunks in a flush: joined, or merged from their pre-grouped lines,
    only when asked (the second only when every chunk came grouped)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._chunks: list[bytes] = []
        self._grouped: list[Grouped] | None = []
        self._joined: bytes | None = None
        self._merged: Grouped | None = None

    def add(self, chunk: bytes, grouped: Grouped | None) -> None:
        self._chunks.append(chunk)
        if grouped is None or self._grouped is None:
            self._grouped = None
        else:
            self._grouped.append(grouped)

    def chunk(self) -> bytes:
        if self._joined is None:
            self._joined = b"".join(self._chunks)
        return self._joined

    def grouped(self) -> Grouped | None:
        if self._merged is None and self._grouped:
            self._merged = merge_grouped(self._grouped)
            if self._merged is None:
                self._grouped = None  # not in order: routed line by line from now on
        return self._merged


_HOST_COLUMNS = (
    "host, address, state, detail, state_ts, journal_id, high_water, malformed, lost, "
    "last_error, seq_offset"
)


class Store:
    """A DuckDB recording. `read_only=True` for replay and reports (refuses writes)."""

    def __init__(self, path: str | Path, read_only: bool = False, check_fields: str = "auto",
                 fold_interval: float = FOLD_INTERVAL, memory_limit: str | None = None):
        if check_fields not in ("auto", "always"):
            raise ValueError(f"check_fields must be 'auto' or 'always', not {check_fields!r}")
        self.path = Path(path)
        self.read_only = read_only
        self.check_fields = check_fields
        self._lock = threading.Lock()
        # Which record tables the writes changed (`cockpit.store.versions`): moved after
        # each commit, read by live readers before they probe the tables.
        self._versions: TableVersions = versions_for(self.path)
        self._scratch: Scratch | None = None
        self.fold_interval = fold_interval
        self._last_fold = -math.inf
        self._pending: dict[str, int] = {}  # level table -> rows parked
        # Earlier runs filed under names of their own (`earlier_runs`): the one write that
        # changes rows a reader may hold answers about, which readers check for.
        self.renames = 0
        # Level table -> its rows when this process last re-clustered it.
        self.clustered_levels: dict[str, int] = {}
        # Folds that merged late rows into a table's closed level rows in place: a
        # re-clustering copy taken before such a merge is stale (`recluster_levels`).
        self._late_merges: Counter[str] = Counter()
        self._cluster_guard = threading.Lock()  # one re-clustering at a time; close waits
        self._cluster_cur: duckdb.DuckDBPyConnection | None = None
        self._closing = False
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory: give the recording's file (a "
                             f"*.duckdb file, e.g. {self.path / 'recording.duckdb'})")
        if read_only and not self.path.exists():
            raise StoreError(f"no recording at {self.path}: the file does not exist")
        if read_only:
            _check_duckdb_header(self.path)
        elif self.path.is_file() and self.path.stat().st_size == 0:
            # An empty file (made by `touch`, or a copy that never started) holds nothing
            # to lose; DuckDB would refuse it as "not a valid database file".
            self.path.unlink()
        self._con = self._connect()
        try:
            if not read_only:
                # A writer runs many small statements a second: a second DuckDB thread
                # costs more in coordination than it saves (-20 % CPU per flush with one,
                # measured on a fleet's flushes and on bulk loads) and leaves the other
                # cores to the transport that feeds it.
                self._con.execute(f"SET threads = {WRITER_THREADS}")
                self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
                self._con.execute(f"SET memory_limit = '{writer_memory_limit() >> 20}MiB'")
            if memory_limit is not None:
                # The caller's own pool size: a replay, which walks the whole file,
                # caps it; a writer's replaces `writer_memory_limit`.
                self._con.execute(f"SET memory_limit = '{memory_limit}'")
            self._migrate()
            if not read_only:
                self._drop_stale_copies()
            self._marks = self._load_marks()
            self._filings: list[Filing] = []  # what a writer needs of the filed runs
            if not read_only:
                with self._cursor() as cur:
                    self._filings = load_filings(cur)
            # Rows parked by a process that ended without folding are folded first.
            self._pending = self._parked() if not read_only else {}
            # Another store open on the file in this process (its counters are shared):
            # what this open did to it (a migration) is seen by that one's readers.
            self._versions.changed_all()
        except duckdb.Error as exc:
            self._con.close()
            raise StoreDamagedError(damaged(self.path, exc)) from None
        except BaseException:
            self._con.close()
            raise

    # -- opening ---------------------------------------------------------------------

    def _parked(self) -> dict[str, int]:
        with self._con.cursor() as cur:
            return {
                table: int(cur.execute(
                    f'SELECT count(*) FROM "{schema.pending_table(table)}"').fetchall()[0][0])
                for table in schema.LEVEL_SERIES
            }

    def _drop_stale_copies(self) -> None:
        """A re-clustering interrupted between its copy and its swap leaves the copy."""
        with self._con.cursor() as cur:
            for table in schema.LEVEL_SERIES:
                cur.execute(f'DROP TABLE IF EXISTS "{clustered_copy(table)}"')

    def _connect(self) -> duckdb.DuckDBPyConnection:
        try:
            return duckdb.connect(str(self.path), read_only=self.read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "could not set lock" in text.lower() or "conflicting lock" in text.lower():
                # DuckDB names the holder as "in PROGRAM (PID n). See also URL": the
                # program and its pid are what the operator needs.
                holder = text.split("Conflicting lock is held in", 1)[-1].strip()
                holder = holder.split(". See also", 1)[0].strip()
                if holder.startswith("in "):
                    holder = holder[3:]
                raise StoreLockedError(
                    f"{self.path} is open for writing by another process ({holder}). "
                    "DuckDB lets no other process read a file while one writes it: close "
                    "that cockpit first, or copy the file together with its write-ahead log "
                    f"({self.path.name}.wal, which holds the newest rows) and open the copy."
                ) from None
            if "could not read enough bytes" in text.lower() or "corrupt" in text.lower():
                raise StoreDamagedError(damaged(self.path, exc)) from None
            raise StoreError(f"cannot open the recording {self.path}: {text}") from None
        except duckdb.Error as exc:
            if unreadable(exc):
                raise StoreDamagedError(damaged(self.path, exc)) from None
            raise StoreError(f"{self.path} is not a readable DuckDB recording: {exc}") from None

    def _version(self) -> int:
        with self._cursor() as cur:
            found = cur.execute(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_name = 'schema_version'"
            ).fetchall()
            if not found[0][0]:
                return 0
            row = cur.execute("SELECT max(version) FROM schema_version").fetchall()
        return int(row[0][0]) if row[0][0] is not None else 0

    def _foreign_tables(self) -> list[str]:
        """Tables of a database that has no schema_version: someone else's data."""
        with self._cursor() as cur:
            rows = cur.execute("SELECT table_name FROM information_schema.tables "
                               "ORDER BY table_name").fetchall()
        return [str(r[0]) for r in rows]

    def _migrate(self) -> None:
        version = self._version()
        if version == 0:
            foreign = self._foreign_tables()
            if foreign:
                shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
                raise StoreVersionError(
                    f"{self.path} is a DuckDB database but not a cockpit recording (it holds "
                    f"{shown}): give a recording, or a new file to record into")
            if self.read_only:
                raise StoreVersionError(
                    f"{self.path} is not a cockpit recording: it is an empty DuckDB "
                    f"database (a recording copied while a cockpit wrote it has its rows in "
                    f"{self.path.name}.wal: copy that file beside it, or copy both again once "
                    "the cockpit has quit)")
        if version > schema.SCHEMA_VERSION:
            raise StoreVersionError(
                f"{self.path} was written by a newer cockpit (schema version {version}; this "
                f"one knows up to {schema.SCHEMA_VERSION}): upgrade the cockpit to open it"
            )
        if version == schema.SCHEMA_VERSION:
            return
        if self.read_only and version >= schema.READABLE_FROM:
            return  # what it lacks only writing needs: replays and reports read it as it is
        if self.read_only:
            raise StoreVersionError(
                f"{self.path} has schema version {version}, older than this cockpit's "
                f"{schema.SCHEMA_VERSION}: open it once without read-only to upgrade it"
            )
        cur = self._con.cursor()
        try:
            cur.execute("BEGIN")
            for step in range(version, schema.SCHEMA_VERSION):
                for ddl in schema.MIGRATIONS[step]:
                    cur.execute(ddl)
            cur.execute("DELETE FROM schema_version")
            cur.execute("INSERT INTO schema_version VALUES ($v)", {"v": schema.SCHEMA_VERSION})
            cur.execute("COMMIT")
        except duckdb.Error as exc:
            cur.execute("ROLLBACK")
            raise StoreError(f"upgrading {self.path} to schema {schema.SCHEMA_VERSION} failed: "
                             f"{exc}") from None
        finally:
            cur.close()

    def _load_marks(self) -> dict[str, _HostMark]:
        marks: dict[str, _HostMark] = {}
        with self._cursor() as cur:
            rows = cur.execute(
                "SELECT h.host, h.high_water, h.journal_id, h.seq_offset, "
                "(SELECT count(*) FROM wire_errors w WHERE w.host = h.host) FROM hosts h"
            ).fetchall()
        for host, hw, journal, offset, samples in rows:
            marks[host] = _HostMark(int(hw or 0), journal, int(offset or 0), samples=int(samples))
        return marks

    # -- reading -----------------------------------------------------------------------

    @contextlib.contextmanager
    def cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A fresh DuckDB cursor for one operation, closed afterwards (any thread).

        What is done through it may change any record table, so live readers ask DuckDB
        about every table at their next refresh (`cockpit.store.versions`); reads use
        `read_cursor`, and this store's own writes say what they changed."""
        self._versions.changed_all()  # a reader's probe meanwhile is asked again after
        try:
            with self._cursor() as cur:
                yield cur
        finally:
            self._versions.changed_all()

    @contextlib.contextmanager
    def read_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """`cursor` for reading only: writes through it would go unseen by live readers'
        probes (`cockpit.store.versions`)."""
        with self._cursor() as cur:
            yield cur

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        cur = self._con.cursor()
        try:
            yield cur
        except duckdb.Error as exc:
            # A file cut short or overwritten: the pages a query needs are not there.
            if not unreadable(exc):
                raise
            raise StoreDamagedError(damaged(self.path, exc)) from None
        finally:
            cur.close()

    def high_water(self, host: str) -> int:
        """Highest committed seq from `host` in its agent's numbering: pass it to --from."""
        mark = self._marks.get(host)
        return mark.high_water if mark else 0

    def hosts(self) -> list[HostRow]:
        with self._cursor() as cur:
            rows = cur.execute(f"SELECT {_HOST_COLUMNS} FROM hosts ORDER BY host").fetchall()
        return [
            HostRow(r[0], r[1], r[2], r[3], r[4], r[5], int(r[6] or 0), int(r[7] or 0),
                    int(r[8] or 0), r[9], int(r[10] or 0))
            for r in rows
        ]

    # -- writing -----------------------------------------------------------------------

    def _writable(self) -> None:
        if self.read_only:
            raise StoreReadOnlyError(f"{self.path} is open read-only: it cannot be written")

    def table_versions(self) -> Versions:
        """Which record tables changed since an earlier call (`Versions.moved`)."""
        return self._versions.now()

    @contextlib.contextmanager
    def write_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside one write transaction, serialised with ingest (maintenance)."""
        self._writable()
        with self._lock:
            try:
                with self._cursor() as cur, _transaction(cur):
                    yield cur
            finally:  # after the commit: any record table's rows may have changed
                self._versions.changed_all()

    def checkpoint(self) -> None:
        """Write everything to the main file (DuckDB otherwise does it on its own schedule)."""
        self._writable()
        with self._lock:
            try:
                with self._cursor() as cur:
                    cur.execute("CHECKPOINT")
            finally:  # a checkpoint after deletes numbers the later rows again
                self._versions.changed_all()

    def set_host_state(
        self, host: str, state: str, detail: str, address: str | None = None,
        ts: float | None = None,
    ) -> None:
        """Record the transport's view of a host (connecting, streaming, stale, ...), as
        of `ts` (now by default; a recording made on its own clock passes that clock's)."""
        self._writable()
        with self._lock, self._cursor() as cur:
            cur.execute(
                "INSERT INTO hosts (host, address, state, detail, state_ts) "
                "VALUES ($host, $address, $state, $detail, $ts) ON CONFLICT (host) DO UPDATE "
                "SET state = excluded.state, detail = excluded.detail, "
                "state_ts = excluded.state_ts, address = coalesce(excluded.address, hosts.address)",
                {"host": host, "address": address, "state": state, "detail": detail,
                 "ts": time.time() if ts is None else ts},
            )

    def ingest(self, host: str, chunk: bytes) -> IngestResult:
        """Store complete NDJSON lines from one host (header lines included)."""
        return self.ingest_many([(host, chunk)])

    def ingest_many(
        self, chunks: Iterable[tuple[str, bytes] | tuple[str, bytes, Grouped | None]]
    ) -> IngestResult:
        """Store several hosts' chunks in one transaction (what the writer does per flush).

        A chunk may come with its lines already grouped (`route.pregroup`, done by the
        writer's callers as chunks arrive); a host whose chunks all are is stored from
        those groups without routing its lines here.

        One host's data cannot cost another host its records: when the flush fails even
        line by line (`careful`), each host is stored in a transaction of its own, and
        the hosts that still fail are reported in `IngestResult.failed` (nothing of
        theirs written, their marks unmoved) while the others commit. When the store
        itself fails (`store_failure`: a full disk) this raises at once, whatever hosts
        committed before, and so it does when every host fails; no host is blamed for
        the store's failure (the writer keeps the lines and retries them).
        """
        self._writable()
        per_host: dict[str, _HostBatch] = {}
        for host, chunk, *rest in chunks:
            batch = per_host.get(host)
            if batch is None:
                per_host[host] = batch = _HostBatch(host)
            batch.add(chunk, rest[0] if rest else None)
        # One group per host and type per flush, however many chunks the transport sent.
        items = list(per_host.values())
        with self._lock:
            if self._scratch is None:
                self._scratch = Scratch()
            try:
                try:
                    result, marks = self._write(items, careful=False)
                except Exception as exc:  # retried line by line, then host by host
                    if store_failure(exc):  # a full disk: no way of writing fares better
                        raise
                    try:
                        result, marks = self._write(items, careful=True)
                    except Exception as again:
                        if len(items) == 1 or store_failure(again):
                            raise
                        result, marks = self._write_each(items)
            except BaseException:
                self._versions.changed_all()  # some hosts' commits may have gone through
                raise
            if result.filed_runs:  # an earlier run's rows renamed (`earlier_runs`)
                self._versions.changed_all()
            else:
                self._versions.added_to(
                    schema.TABLE_FOR_TYPE[t] for t, n in result.by_type.items()
                    if n and t in schema.TABLE_FOR_TYPE)
            for host, mark in marks.items():
                mark.malformed = mark.lost = 0
                mark.notes = []
                mark.segment_offsets = []
                mark.reset = mark.touched = False
                self._marks[host] = mark
            self.renames += len(result.filed_runs)
        return result

    def _write(
        self, items: list[_HostBatch], careful: bool
    ) -> tuple[IngestResult, dict[str, _HostMark]]:
        # Over 80 lines: one flush in one transaction (route each host's lines past its
        # mark, then load, file runs and fold levels); the careful and the fast path share
        # every step of it.
        assert self._scratch is not None
        marks: dict[str, _HostMark] = {}
        pieces: dict[str, list[Piece]] = {}  # wire type -> its pieces, all hosts
        duplicates = 0
        for item in items:
            host = item.host
            if host not in marks:
                marks[host] = replace(self._marks.get(host) or _HostMark(), notes=[],
                                      segment_offsets=[])
            mark = marks[host]
            mark.touched = True
            initial_offset = mark.seq_offset
            seen_headers = len(mark.segment_offsets)
            grouped = None if careful else item.grouped()
            if grouped is not None and grouped.head > mark.high_water:
                # Wholly above the mark, in order: every line is new.
                segments = [replace(grouped.segment, end_mark=grouped.tail)]
            else:
                split = route_chunk if careful else split_chunk
                segments = split(item.chunk(), mark.high_water,
                                 functools.partial(self._on_header, mark))
            header_offsets = iter(mark.segment_offsets[seen_headers:])
            for segment in segments:
                offset = initial_offset
                if segment.header is not None:
                    offset = next(header_offsets)
                    mark.high_water = segment.start_mark
                duplicates += segment.duplicates
                self._note_malformed(mark, segment.malformed)
                check = self.check_fields == "always" or mark.protocol is None or (
                    mark.protocol > PROTOCOL_VERSION
                )
                for wire_type, lines in segment.groups.items():
                    pieces.setdefault(wire_type, []).append(Piece(
                        host, offset, lines, segment.seqs[wire_type], check,
                        segment.joined.get(wire_type),
                    ))
                if segment.end_mark is not None:
                    mark.high_water = segment.end_mark
        by_type: Counter[str] = Counter()
        by_host: Counter[str] = Counter()
        cur = self._con.cursor()
        checker = self._con.cursor() if careful else None
        now = time.monotonic()
        pending = dict(self._pending)
        fold = now - self._last_fold >= self.fold_interval or _backlog_due(pieces, pending)
        filing: list[Filing] = []  # this flush's
        starts = start_lines((p.host, p.offset, p.lines) for p in pieces.get("event", ()))
        filings = [f.copy() for f in self._filings]
        try:
            with _transaction(cur):
                # The chart levels before the flush's own rows are loaded, each under the
                # run it belongs to (`late_rows_job`: the flush may hold the earlier run's
                # last); the stored rows after them.
                for job, start in fresh_starts(starts):
                    trains = (line for p in pieces.get("train", ()) for line in p.lines)
                    name = file_earlier_run(cur, job, start, steps_before(trains, job, start))
                    if name is not None:
                        filing.append(Filing(job, name, start))
                filings += filing
                for start_line in starts:
                    for filed in filings:
                        filed.note_start(start_line)
                for wire_type, group in pieces.items():
                    load = load_type(cur, checker, self._scratch, wire_type, group, filings)
                    for piece in group:
                        self._note_malformed(marks[piece.host], piece.result.malformed)
                        self._note_repaired(marks[piece.host], piece.result.repaired)
                        by_host[piece.host] += piece.result.stored
                    if load.stored:
                        by_type[wire_type] += load.stored
                        table = schema.TABLE_FOR_TYPE.get(wire_type)
                        if table in schema.LEVEL_SERIES and _keep_levels(
                                cur, table, load, fold, pending):
                            self._late_merges[table] += 1
                for filed in filing:
                    rename_earlier_rows(cur, filed)
                if any(n >= FOLD_MAX_PENDING for n in pending.values()):
                    fold = True
                if fold:
                    for table, parked in pending.items():
                        if parked and fold_pending(cur, table):
                            self._late_merges[table] += 1
                    pending = {}
                self._write_hosts(cur, marks)
            self._pending = pending
            self._filings = filings
            if fold:
                self._last_fold = now
        finally:
            cur.close()
            if checker is not None:
                checker.close()
        last = items[-1].host if items else None
        result = IngestResult(
            stored=sum(by_type.values()),
            duplicates=duplicates,
            malformed=sum(m.malformed for m in marks.values()),
            max_seq=marks[last].high_water if last is not None else 0,
            by_type=dict(by_type),
            by_host={h: by_host[h] for h in marks},
            journal_resets=tuple(h for h, m in marks.items() if m.reset),
            filed_runs=tuple((filed.job, filed.name) for filed in filing),
        )
        return result, marks

    def _write_each(
        self, items: list[_HostBatch]
    ) -> tuple[IngestResult, dict[str, _HostMark]]:
        """`_write` of each host alone (careful): the flush as far as it can go."""
        results: list[IngestResult] = []
        marks: dict[str, _HostMark] = {}
        failed: list[tuple[str, str]] = []
        first_error: Exception | None = None
        for item in items:
            try:
                result, host_marks = self._write([item], careful=True)
            except Exception as exc:
                if store_failure(exc):  # a full disk, say: no host would fare better
                    raise
                first_error = first_error or exc
                failed.append((item.host, f"{type(exc).__name__}: {_first_line(exc)}"))
                continue
            results.append(result)
            marks.update(host_marks)
            # The next host's `_write` starts from what this one committed.
            for host, mark in host_marks.items():
                self._marks[host] = replace(mark, notes=[], segment_offsets=[],
                                            malformed=0, lost=0, reset=False,
                                            touched=False)
        if not results:
            assert first_error is not None
            raise first_error
        return replace(merge_results(results), failed=tuple(failed)), marks

    def _on_header(self, mark: _HostMark, header: dict[str, object], running: int) -> int:
        """The mark to go on from after a stream header (see the module's docstring).

        The header is the host's word, so it is bounded like any record: seqs outside
        0..SEQ_MAX, or a `from` past the records this store holds of the same journal
        (the cockpit asked from its own mark, so the agent cannot honour a later one:
        trusting it would drop every record up to it as a duplicate), are refused,
        noted as a wire error of the host, and the stream is stored from the mark.
        """
        journal = header.get("journal_id")
        journal = journal if isinstance(journal, str) and 0 < len(journal) <= 200 else None
        protocol = header.get("protocol")
        mark.protocol = protocol if isinstance(protocol, int) else None
        start = _int(header.get("from"))
        first = _int(header.get("first"))
        head = _int(header.get("head"))
        bad = [f"{name}={_short(header.get(name))}" for name in ("from", "first", "head")
               if name in header and not seq_ok(header.get(name))]
        if bad:
            mark.notes.append((f"stream header with {', '.join(bad)} (seqs are integers "
                               f"0..{SEQ_MAX}): ignored them", _sample(header)))
            start = start if seq_ok(start) else 0
            first = first if seq_ok(first) else 0
        if journal is not None and mark.journal_id is not None and journal != mark.journal_id:
            if mark.seq_offset + max(mark.high_water, running) > OFFSET_MAX:
                mark.notes.append((
                    f"journal reset to {journal} refused: the host's seqs would pass what "
                    "the store can hold; its records are stored as the old journal's",
                    _sample(header)))
                mark.segment_offsets.append(mark.seq_offset)
                return running
            new_offset = mark.seq_offset + max(mark.high_water, running)
            mark.notes.append((
                f"journal reset: journal_id {mark.journal_id} became {journal}; its seqs "
                f"restart, stored from seq {new_offset + 1} on",
                "",
            ))
            mark.journal_id = journal
            mark.seq_offset = new_offset
            mark.reset = mark.reset or start > 0  # its records up to `start` not sent
            mark.segment_offsets.append(new_offset)
            return 0
        if journal is not None:
            mark.journal_id = journal
        mark.segment_offsets.append(mark.seq_offset)
        if start > running:
            mark.notes.append((
                f"stream header says it starts after seq {start}, past the {running} this "
                f"recording holds of journal {mark.journal_id} (head {head}): refused; "
                f"its records are stored from seq {running + 1}", _sample(header)))
            start = running
        effective = max(running, start)
        if first > effective + 1 and first <= max(head, effective) + 1:
            mark.lost += first - effective - 1
        return effective

    def _note_malformed(self, mark: _HostMark, bad: list[Malformed]) -> None:
        mark.malformed += len(bad)
        self._note_repaired(mark, bad)

    @staticmethod
    def _note_repaired(mark: _HostMark, items: list[Malformed]) -> None:
        """Kept among the host's samples (the newest as its last error). A record stored
        without some values goes only here: it is not counted as malformed."""
        for item in items:
            mark.notes.append((item.error, item.line[:_SAMPLE_BYTES].decode("utf-8", "replace")))

    def _write_hosts(self, cur: duckdb.DuckDBPyConnection, marks: dict[str, _HostMark]) -> None:
        """One statement for all hosts of the flush (hundreds, for a fleet)."""
        if not marks:
            return
        hosts = list(marks)
        cur.execute(
            "INSERT INTO hosts (host, journal_id, high_water, malformed, lost, last_error, "
            "seq_offset) SELECT unnest($hosts::VARCHAR[]), unnest($journals::VARCHAR[]), "
            "unnest($hws::BIGINT[]), unnest($bad::BIGINT[]), unnest($lost::BIGINT[]), "
            "unnest($errs::VARCHAR[]), unnest($offsets::BIGINT[]) "
            "ON CONFLICT (host) DO UPDATE SET journal_id = excluded.journal_id, "
            "high_water = excluded.high_water, "
            "malformed = hosts.malformed + excluded.malformed, "
            "lost = hosts.lost + excluded.lost, "
            "last_error = coalesce(excluded.last_error, hosts.last_error), "
            "seq_offset = excluded.seq_offset",
            {"hosts": hosts,
             "journals": [marks[h].journal_id for h in hosts],
             "hws": [marks[h].high_water for h in hosts],
             "bad": [marks[h].malformed for h in hosts],
             "lost": [marks[h].lost for h in hosts],
             "errs": [marks[h].notes[-1][0] if marks[h].notes else None for h in hosts],
             "offsets": [marks[h].seq_offset for h in hosts]},
        )
        now = time.time()
        kept: list[tuple[str, str, str]] = []
        for host, mark in marks.items():
            room = max(WIRE_ERROR_SAMPLES_PER_HOST - mark.samples, 0)
            kept += [(host, e, sample) for e, sample in mark.notes[:room]]
            mark.samples += min(room, len(mark.notes))
        if kept:
            cur.execute(
                "INSERT INTO wire_errors SELECT unnest($hosts::VARCHAR[]), $ts, "
                "unnest($errors::VARCHAR[]), unnest($samples::VARCHAR[])",
                {"hosts": [k[0] for k in kept], "ts": now, "errors": [k[1] for k in kept],
                 "samples": [k[2] for k in kept]},
            )

    def recluster_levels(self, min_new_rows: int = CLUSTER_MIN_NEW_ROWS) -> list[str]:
        """Rewrite, in chart order, each level table grown by `min_new_rows` or more since
        this process last did; returns the tables rewritten. Call it from its own thread.

        A rewrite reads the whole table (21 s for 7 M gpu level rows), so it must not hold
        up ingest: the ordered copy is written in a transaction of its own, from a
        snapshot taken between two flushes, while flushes go on. Only the swap takes the
        write lock: it appends the rows closed since the snapshot and replaces the table
        (tens of milliseconds). Closed level rows are only appended, except that a late
        row (a relaunched run repeating steps) merges into its closed bucket in place; a
        copy that predates such a merge is dropped, and the next call starts over.
        `close()` interrupts a rewrite in progress.
        """
        self._writable()
        rewritten: list[str] = []
        with self._cluster_guard:
            for table in schema.LEVEL_SERIES:
                if self._closing:
                    break
                name = schema.levels_table(table)
                with self._cursor() as cur:
                    self._cluster_cur = cur
                    try:
                        if self._recluster(cur, table, min_new_rows):
                            rewritten.append(name)
                    except duckdb.InterruptException:
                        with contextlib.suppress(duckdb.Error):
                            cur.execute("ROLLBACK")
                        break
                    finally:
                        self._cluster_cur = None
        return rewritten

    def _recluster(self, cur: duckdb.DuckDBPyConnection, table: str, min_new_rows: int) -> bool:
        name = schema.levels_table(table)
        with self._lock:  # no flush in flight: the snapshot holds every committed row
            if self._closing:
                return False
            cur.execute("BEGIN")
            rows, top = cur.execute(f'SELECT count(*), max(rowid) FROM "{name}"').fetchone() \
                or (0, None)
            late = self._late_merges[table]
        grown = int(rows) - self.clustered_levels.get(name, 0)
        if top is None or (name in self.clustered_levels and grown < min_new_rows):
            cur.execute("ROLLBACK")
            return False
        with _transaction_end(cur):
            copy_clustered(cur, table)
        with self._lock, _transaction(cur):
            if self._closing or self._late_merges[table] != late:
                cur.execute(f'DROP TABLE "{clustered_copy(table)}"')
                return False
            swap_clustered(cur, table, int(top))
        self.clustered_levels[name] = int(rows)
        return True

    def fold_levels(self) -> None:
        """Fold every parked row into the level tables now (closing, maintenance)."""
        self._writable()
        with self._lock:
            self._fold_all()

    def _fold_all(self) -> None:
        if not any(self._pending.values()):
            return
        with self._cursor() as cur, _transaction(cur):
            for table in schema.LEVEL_SERIES:
                if self._pending.get(table) and fold_pending(cur, table):
                    self._late_merges[table] += 1
        self._pending = {}
        self._last_fold = time.monotonic()

    def close(self) -> None:
        self._closing = True
        # An interrupt only stops the statement running at that moment: repeat it until
        # a re-clustering in progress has given up.
        while not self._cluster_guard.acquire(timeout=0.05):
            cur = self._cluster_cur
            if cur is not None:
                with contextlib.suppress(duckdb.Error):
                    cur.interrupt()
        self._cluster_guard.release()
        with self._lock:
            if not self.read_only:
                # Parked rows are safe in the file either way; folding them now spares
                # every later reader the on-the-fly rollup.
                with contextlib.suppress(duckdb.Error):
                    self._fold_all()
            if self._scratch is not None:
                self._scratch.close()
                self._scratch = None
            self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _backlog_due(pieces: dict[str, list[Piece]], pending: dict[str, int]) -> bool:
    """Whether this flush brings a level table's parked rows to FOLD_MAX_PENDING.

    Known before loading, a flush that is due folds its rows straight from the load when
    nothing of their table is parked (a backlog's large flush), instead of parking them
    and reading them back in the same transaction.
    """
    for wire_type, group in pieces.items():
        table = schema.TABLE_FOR_TYPE.get(wire_type)
        if table in schema.LEVEL_SERIES:
            incoming = sum(len(piece.lines) for piece in group)
            if pending.get(table, 0) + incoming >= FOLD_MAX_PENDING:
                return True
    return False


def _keep_levels(cur: duckdb.DuckDBPyConnection, table: str, load: TypeLoad, fold: bool,
                 pending: dict[str, int]) -> bool:
    """Fold a flush's new rows of `table` into its level tables now, when a fold is due
    and nothing of the table waits before them; park them for the next fold otherwise.

    True when the fold merged late rows into closed buckets."""
    if fold and not pending.get(table):
        if load.staged is not None:
            return fold_staged(cur, table, load.staged)
        return update_levels(cur, table, load.first_seq)
    if load.staged is not None:
        parked = defer_staged(cur, table, load.staged)
    else:
        parked = defer_levels(cur, table, load.first_seq)
    pending[table] = pending.get(table, 0) + parked
    return False


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first_line(exc: Exception) -> str:
    return (str(exc).split("\n", 1)[0] or type(exc).__name__)[:_SAMPLE_BYTES]


def _sample(header: dict[str, object]) -> str:
    return repr(header)[:_SAMPLE_BYTES]
