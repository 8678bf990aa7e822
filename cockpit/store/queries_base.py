"""Shared machinery of the read API: cursors, row decoding and bounded "recent" probes.

Every read takes `until_ts` (the replay cursor; None = everything), so a replay can
never see past its cursor. Latest-value reads must stay cheap on tables of tens of
millions of rows: DuckDB keeps min/max statistics per row group, and records arrive in
roughly time order, so a predicate `ts > T` skips almost every row group when T is
recent. `_recent` therefore asks for a narrow window before the table's newest record
and widens it geometrically only when the window holds too little; the unbounded query
is the last resort for data that is genuinely old.

Over 500 lines because the reader's kept answers (`memo`, `kept`, `latest_per_held`) and
the bounded probes are one mechanism: every kept answer is keyed by the frontiers found
here and extended from the rows added past them, with the probes' windows.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import itemgetter
from typing import Any, Protocol, TypeVar

import orjson

from cockpit.store.queries_frontiers import (
    Frontiers,
    ReadAhead,
    RowName,
    carried_over,
    probe_ahead,
    probe_frontiers,
    probe_next,
)
from cockpit.store.schema import RECORD_COLUMNS
from cockpit.store.versions import Versions

# Seconds before the newest record that a probe looks at, widening in turn (None: all).
WINDOWS: tuple[float | None, ...] = (120.0, 1800.0, 6 * 3600.0, None)
JSON_COLUMNS = frozenset(
    name for cols in RECORD_COLUMNS.values() for name, typ in cols.items() if typ == "JSON"
) | {"raw"}
RECORD_TABLES: tuple[str, ...] = tuple(RECORD_COLUMNS)
# A replay cursor moved by at most this much past a table's frontier finds the new one
# by a range read from the old (and looks this far ahead for the next row).
NEAR_MOVE_S = 300.0
# Rows of one table a replay reads ahead of its cursor at once, at most (`ReadAhead`).
READ_AHEAD_ROWS = 2048
LATEST_ADDED_LIMIT = 20_000  # more added rows than this: the full read is cheaper
ANCHORS_KEPT = 8  # newest row names per table kept, one per recent frontier (`_anchors`)
# A kept answer (`ReaderBase.kept`) is read in full again after this many extensions, so
# that nothing an extension could not see stays wrong for long.
FULL_READ_EVERY = 240

# Columns no kept answer reads (`added_rows`, `latest_per_held`): only a host's detail
# view shows them (the processes a sample lists, a GPU's clocks, fan, PCIe and NVLink
# figures, corrected ECC counts and retired pages), from reads of its own. A live
# 1,024-GPU fleet adds a thousand GPU rows a second: read as 15 columns rather than 28,
# with no JSON to decode, they cost 2.3 ms rather than 4.3. A snapshot reads a GPU row's
# host, gpu, ts, seq, sim, util, temp, power, power_limit, mem_used, mem_total,
# ecc_vol_unc, ecc_agg_unc, throttle and remap_pending (tests/store/test_latest_held.py).
NOT_KEPT: dict[str, tuple[str, ...]] = {
    "gpu": ("uuid", "mem_util", "sm_clock", "mem_clock", "fan", "ecc_vol_corr",
            "ecc_agg_corr", "retired_pages", "pcie_tx", "pcie_rx", "pcie_replay",
            "nvlink_err", "procs"),
    "host_sample": ("procs",),
}

Row = dict[str, Any]
T = TypeVar("T")


def kept_columns(table: str) -> str:
    """The select list of a kept answer's rows of `table` (every column but `NOT_KEPT`'s)."""
    left_out = NOT_KEPT.get(table)
    return f"* EXCLUDE ({', '.join(left_out)})" if left_out else "*"


class StoreLike(Protocol):
    def cursor(self) -> AbstractContextManager[Any]: ...


def _decode(name: str, value: Any) -> Any:
    if name in JSON_COLUMNS and isinstance(value, str | bytes):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _ordered(by_key: dict[tuple, Row], keys: Sequence[str]) -> list[Row]:
    """The rows by their `keys`' values, NULLs last. `by_key` is keyed by those values
    (as `latest_per` keys it): where none is NULL, the keys themselves sort the rows,
    which spares building a sort key per row (a 1,024-GPU fleet, every refresh)."""
    if not any(None in key for key in by_key):
        return [by_key[key] for key in sorted(by_key)]
    return sorted(by_key.values(), key=lambda r: tuple((r[k] is None, r[k]) for k in keys))


def until_clause(until_ts: float | None, column: str = "ts") -> tuple[str, list[Any]]:
    return ("", []) if until_ts is None else (f" AND {column} <= ?", [until_ts])


class ReaderBase:
    """Holds the store; each public read opens one cursor (safe from worker threads)."""

    def __init__(self, store: StoreLike) -> None:
        self._store = store
        # A reader only reads: through the store's read cursor where it has one, which
        # leaves its live probes' table counters alone (`cockpit.store.versions`).
        self._read_cursor: Callable[[], AbstractContextManager[Any]] = getattr(
            store, "read_cursor", store.cursor)
        self._memo_lock = threading.Lock()
        # host -> (until the value was computed for, last ts seen): see `_old_last_seen`.
        self._last_seen_memo: dict[str, tuple[float, float]] = {}
        # name -> (key, value): one remembered answer per kind of read, see `memo`.
        self._memo: dict[str, tuple[Any, Any]] = {}
        self._sizes: dict[str, int] = {}  # rows per table at the last `frontiers` call
        # A read-only store's last frontiers and each table's next ts after them.
        self._frontier_hint: tuple[Frontiers, Mapping[str, float | None]] | None = None
        # The last frontiers of the whole store, where a live store's newest rows start.
        self._newest_found: Frontiers | None = None
        self._added_locks: dict[str, threading.RLock] = {}  # see `added_rows`
        self._ahead: dict[str, ReadAhead] = {}  # a replay's rows past its cursor
        # table -> row id -> the name of the row the store numbered so, for the newest
        # row of the last few live frontiers: see `added_after`.
        self._anchors: dict[str, dict[int, RowName]] = {}
        self._renames_seen = 0  # the store's `renames` when the held answers were read
        # The store's table counters read before the last live probe (`_probe_live`).
        self._tables_seen: Versions | None = None
        self._versions = itertools.count(1)  # see `event_version`: never handed out twice

    @property
    def static(self) -> bool:
        """Whether the store was opened read-only: nothing in it can change while it
        is open (DuckDB locks the file against writers)."""
        return getattr(self._store, "read_only", False) is True

    def memo(self, name: str, key: Any, compute: Callable[[], T]) -> T:
        """The answer last computed under `name` if it was computed for `key`, else a
        fresh one (remembered in its place).

        A key made of the `Frontiers.key` of every table a read looks at identifies the
        rows that read can see, so a screen refresh re-reads only what changed. One
        answer per name keeps the memory bounded however long the run or the replay.
        """
        with self._memo_lock:
            held = self._memo.get(name)
        if held is not None and held[0] == key:
            return held[1]
        value = compute()
        self.remember(name, key, value)
        return value

    def remember(self, name: str, key: Any, value: Any) -> None:
        """Put `value` in `name`'s place for `key`: for a caller that keeps an answer up
        to date piece by piece (what `memo` returned, with the parts that changed)."""
        with self._memo_lock:
            self._memo[name] = (key, value)

    def recall(self, name: str) -> tuple[Any, Any] | None:
        """(key, value) last remembered under `name`, for a caller that extends an old
        answer with what was added since (see `added_after`)."""
        with self._memo_lock:
            return self._memo.get(name)

    def event_version(self, name: str, frontiers: Frontiers, until_ts: float | None,
                      relevant: Callable[[Row], bool]) -> int:
        """Stands for the event table in the `memo` key of a read that looks at some
        events only (a job's lifecycle, the XIDs, the checkpoints): `rows_version`.

        Keyed by the whole table's frontier, every new event (a GPU's XID somewhere in
        the fleet, a checkpoint) read them all again: a dozen reads, tens of
        milliseconds of the refresh that saw it."""
        return self.rows_version(name, "event", frontiers, until_ts, relevant)

    def rows_version(self, name: str, table: str, frontiers: Frontiers,
                     until_ts: float | None, relevant: Callable[[Row], bool]) -> int:
        """Stands for `table` in the `memo` key of a read that some of its rows change:
        the same while none of the rows that became visible since is one `relevant`
        says the read looks at, a new number otherwise, or when what was added cannot
        be told (rows gone, a replay seeking back, a flood past `added_rows`' limit).

        The rows added are read once for every such key (`added_rows`). After
        `FULL_READ_EVERY` carried versions the read is done afresh anyway, as a `kept`
        answer is.
        """
        slot = f"{table}-version:{name}"
        held = self.recall(slot)
        if held is not None:
            held_fr, (version, carried) = held
            if held_fr.key(table) == frontiers.key(table):
                return int(version)
            if carried < FULL_READ_EVERY:
                after = self.added_after(table, held_fr, frontiers)
                added = (None if after is None
                         else self.added_rows(table, after, until_ts, frontiers))
                if added is not None and not any(relevant(r) for r in added):
                    self.remember(slot, frontiers, (version, carried + 1))
                    return int(version)
        version = next(self._versions)
        self.remember(slot, frontiers, (version, 0))
        return version

    def added_after(self, table: str, before: Frontiers, now: Frontiers) -> float | None:
        """A ts such that `added_rows(table, ts, ...)` answers every row of `table`
        visible at `now` but not at `before` (and none was removed), or None when that
        cannot be told cheaply.

        A replay moving forward over an unchanged store sees exactly the rows of its
        cursor's advance. A live store gains rows in any ts order (a fleet's hosts
        sample at their own phase and send with their own delay, a host that was away
        sends its backlog), so they are found by the ids the store gave them, not by
        their ts (`_added_by_ids`): then `added_rows` answers rows older than the ts.
        """
        rows_before, rows_now = before.rows.get(table), now.rows.get(table)
        if rows_before is None or rows_now is None:
            return None
        if before.until_ts is not None and now.until_ts is not None:
            if rows_now == rows_before and now.until_ts >= before.until_ts:
                return before.until_ts
            return None
        if before.until_ts is not None or now.until_ts is not None or rows_now < rows_before:
            return None
        old_end = before.ts.get(table)
        if old_end is None:
            return None
        key = (old_end, None, now.key(table))
        # Under the table's lock: the answers extended side by side read the rows once.
        with self._added_lock(table):
            held = self.recall(f"added-from:{table}")
            if held is not None and held[0] == key:
                # Read for this frontier already: from the same one, or (two answers held
                # since different refreshes whose tables ended at the same ts) from
                # another, whose rows would not be this one's: then the full read.
                read_from, found = held[1]
                return old_end if found and read_from == before.key(table) else None
            added = self._added_by_ids(table, before, now, old_end, rows_now - rows_before)
            if added is not None:
                self.remember(f"added:{table}", key, added)
            self.remember(f"added-from:{table}", key, (before.key(table), added is not None))
            return None if added is None else old_end

    def _added_by_ids(self, table: str, before: Frontiers, now: Frontiers, old_end: float,
                      growth: int) -> list[Row] | None:
        """The rows of `table` the store numbered after `before`'s newest and up to
        `now`'s, all columns but `NOT_KEPT`'s; None where they cannot be told so.

        DuckDB numbers a table's rows in the order they were stored. A checkpoint after
        deletes (retention) may number the rows after them again, so the row at
        `before`'s newest id must still be the one named then (`_anchors`), and the
        rows read must account for the whole growth and reach `now`'s newest ts: else
        the caller reads in full. The newest row's name is kept for the next refresh.
        """
        lo, hi = before.ids.get(table), now.ids.get(table)
        with self._memo_lock:
            anchor = self._anchors.get(table, {}).get(lo) if lo is not None else None
        if lo is None or hi is None or anchor is None or growth > LATEST_ADDED_LIMIT:
            return None
        with self._cur() as cur:
            # The id last, where the rows' dicts leave it out (`_rows` zips the names).
            cur.execute(f'SELECT {kept_columns(table)}, rowid FROM "{table}" '
                        f"WHERE rowid >= ? AND rowid <= ? LIMIT {LATEST_ADDED_LIMIT + 2}",
                        [lo, hi])
            names = [d[0] for d in cur.description][:-1]
            found = cur.fetchall()
        ids = [row[-1] for row in found]
        host, seq = names.index("host"), names.index("seq")
        try:
            at, newest = ids.index(lo), ids.index(hi)
        except ValueError:
            return None
        named = found[at]
        if (named[host], named[seq]) != anchor or len(found) - 1 != growth:
            return None
        last = found[newest]
        del found[at]
        added = self._rows(names, found)
        if max([old_end, *(r["ts"] for r in added)]) != now.ts.get(table):
            return None  # the newest row is none of those read: rows went away
        self._keep_anchor(table, hi, (last[host], last[seq]))
        return added

    def _keep_anchor(self, table: str, row_id: int, name: RowName) -> None:
        """`name` for the row numbered `row_id`, with those of the few frontiers before
        (an answer held from an older refresh extends from its own)."""
        with self._memo_lock:
            held = self._anchors.setdefault(table, {})
            held[row_id] = name
            while len(held) > ANCHORS_KEPT:
                del held[next(iter(held))]

    def unanchored(self, previous: Frontiers | None) -> list[str]:
        """The tables whose newest row at `previous` the reader cannot name: a live probe
        names their newest row (`probe_frontiers`), as a read of the rows added since
        `previous` cannot vouch for it. A table that was empty then is not among them
        (naming nothing costs the probe as much): the refresh after its first rows
        reads its answers in full."""
        if previous is None or previous.until_ts is not None:
            return list(RECORD_TABLES)
        with self._memo_lock:
            return [t for t in RECORD_TABLES
                    if (i := previous.ids.get(t)) is not None
                    and i not in self._anchors.get(t, {})]

    def added_rows(self, table: str, after: float, until_ts: float | None,
                   frontiers: Frontiers) -> list[Row] | None:
        """Every row of `table` with `after` < ts (<= `until_ts`), all columns but those
        `NOT_KEPT`, or None when there are more than `LATEST_ADDED_LIMIT` (a full read
        is cheaper then).

        What the `kept` answers about one table extend themselves from: read once per
        frontier and shared, so that a refresh reads the rows a replay step or a live
        batch added once, not once per answer (the latest sample per GPU and the GPU
        busy series both build on the same GPU rows). The rows are shared: not to be
        changed.
        """
        ahead = self._ahead.get(table)
        if until_ts is not None and ahead is not None and ahead.covers(after, until_ts):
            return ahead.between(after, until_ts)
        key = (after, until_ts, frontiers.key(table))
        with self._added_lock(table):
            held = self.recall(f"added:{table}")
            if held is not None and held[0] == key:
                return held[1]
            if until_ts is None:
                # Live, the rows added are found by their ids (`added_after`), read
                # then for every answer; by ts they would miss those that came late.
                return None
            cond, args = until_clause(until_ts)
            with self._cur() as cur:
                rows = self.fetch(cur, f'SELECT {kept_columns(table)} FROM "{table}" '
                                       f"WHERE ts > ?{cond} "
                                       f"LIMIT {LATEST_ADDED_LIMIT + 1}", [after, *args])
            found = rows if len(rows) <= LATEST_ADDED_LIMIT else None
            self.remember(f"added:{table}", key, found)
            return found

    def _added_lock(self, table: str) -> threading.RLock:
        """One lock per table, so that two answers extended side by side from the same
        rows wait for one read instead of making two (and the late rows are found
        once, `added_after`)."""
        with self._memo_lock:
            return self._added_locks.setdefault(table, threading.RLock())

    def kept(self, name: str, params: Any, table: str, frontiers: Frontiers,
             read: Callable[[], T], extend: Callable[[T, float], T | None]) -> T:
        """An answer about `table` remembered under `name` for `params`, kept up to date.

        Unchanged while the table's visible rows are (its frontier key). When the table
        only gained rows newer than a known ts (`added_after`), `extend(held, after_ts)`
        brings the held answer up to date from those rows alone, or returns None when it
        cannot do so exactly; otherwise, and every `FULL_READ_EVERY`th time so that
        nothing an extension could miss stays wrong for long, `read()` starts afresh.
        """
        held = self.recall(name)
        if held is not None:
            (held_params, held_fr, extensions), value = held
            if held_params == params:
                if held_fr.key(table) == frontiers.key(table):
                    return value
                after = (self.added_after(table, held_fr, frontiers)
                         if extensions < FULL_READ_EVERY else None)
                if after is not None:
                    extended = extend(value, after)
                    if extended is not None:
                        self.remember(name, (params, frontiers, extensions + 1), extended)
                        return extended
        fresh = read()
        self.remember(name, (params, frontiers, 0), fresh)
        return fresh

    def frontiers(self, *, until_ts: float | None = None) -> Frontiers:
        """Every record table's newest ts at or before `until_ts`, and its size.

        A store opened read-only cannot change while it is open (DuckDB locks the file
        against writers), so a replay asks again only about the tables whose frontier
        the cursor may have moved: a table's stays put while the cursor is at or after
        it and before the table's next row (`probe_next`).
        """
        renames = getattr(self._store, "renames", 0)
        if renames != self._renames_seen:
            # Rows already read were renamed (an earlier run filed away): no answer held
            # about them still holds, and no frontier says so (counts and times stay).
            with self._memo_lock:
                self._memo.clear()
            self._renames_seen = renames
        static = self.static
        held = self._frontier_hint
        if static and until_ts is not None and held is not None:
            return self._moved_frontiers(until_ts, *held)
        with self._cur() as cur:
            if until_ts is None:
                found = self._probe_live(cur)
                self._newest_found = found
                for table, name in found.anchors.items():
                    self._keep_anchor(table, found.ids[table], name)
            else:
                found = probe_frontiers(cur, RECORD_TABLES, until_ts, WINDOWS, self._sizes)
            if static and until_ts is not None:
                self._frontier_hint = (found, probe_next(cur, RECORD_TABLES, until_ts))
        self._sizes = dict(found.rows)
        return found

    def _probe_live(self, cur: Any) -> Frontiers:
        """The whole store's frontiers, asking DuckDB only about the tables a write
        changed since the last probe (`cockpit.store.versions`) and those whose newest
        row the reader cannot name (`unanchored`); the others' are the last probe's."""
        counters = getattr(self._store, "table_versions", None)
        seen: Versions | None = counters() if callable(counters) else None  # before the probe
        previous, since = self._newest_found, self._tables_seen
        unanchored = self.unanchored(previous)
        if seen is None or since is None or previous is None:
            found = probe_frontiers(cur, RECORD_TABLES, None, WINDOWS, self._sizes, previous,
                                    unanchored)
        else:
            asked = [t for t in RECORD_TABLES if seen.moved(since, t) or t in unanchored]
            found = previous if not asked else carried_over(previous, probe_frontiers(
                cur, asked, None, WINDOWS, self._sizes, previous, unanchored), RECORD_TABLES)
        self._tables_seen = seen  # only once the probe answered: else asked again
        return found

    def _moved_frontiers(self, until_ts: float, held: Frontiers,
                         next_ts: Mapping[str, float | None]) -> Frontiers:
        def still(table: str) -> bool:
            f, n = held.ts.get(table), next_ts.get(table)
            return (f is None or f <= until_ts) and (n is None or until_ts < n)

        moved = [t for t in RECORD_TABLES if not still(t)]
        # Moved forward a little past a frontier it had (or past its first row): the
        # rows read ahead, or a range read from there.
        near = {t: f for t in moved if (f := held.ts.get(t)) is not None
                and f <= until_ts and until_ts - f <= NEAR_MOVE_S}
        first = [t for t in moved if held.ts.get(t) is None
                 and (n := next_ts.get(t)) is not None and until_ts - n <= NEAR_MOVE_S]
        far = [t for t in moved if t not in near and t not in first]
        ts = dict(held.ts)
        nexts = dict(next_ts)
        for t in far:
            self._ahead.pop(t, None)
        unread = {}
        for t in [*near, *first]:
            f = near.get(t)
            ahead = self._ahead.get(t)
            if ahead is None or not ahead.covers(f, until_ts):
                ahead = self._read_ahead(t, f, until_ts)
            if ahead is None:
                if f is None:
                    far.append(t)
                else:
                    unread[t] = f
                continue
            ts[t] = ahead.frontier(until_ts)
            nexts[t] = ahead.next_after(until_ts)
        if unread or far:
            with self._cur() as cur:
                if unread:
                    found_near, next_near = probe_ahead(cur, unread, until_ts, NEAR_MOVE_S)
                    ts.update(found_near)
                    nexts.update(next_near)
                if far:
                    ts.update(probe_frontiers(cur, far, until_ts, WINDOWS, self._sizes).ts)
                    nexts.update(probe_next(cur, far, until_ts))
        fresh = Frontiers(until_ts, ts, held.rows)
        self._frontier_hint = (fresh, nexts)
        return fresh

    def _read_ahead(self, table: str, frontier: float | None,
                    until_ts: float) -> ReadAhead | None:
        """The rows of `table` after its old `frontier` (None: from its first), up to
        `NEAR_MOVE_S` past the cursor or `READ_AHEAD_ROWS` of them, or None when those
        stop short of the cursor (a long jump over a dense table: probed instead)."""
        after = "" if frontier is None else "ts > ? AND "
        with self._cur() as cur:
            # The rows chosen on the three ordering columns, then read whole by rowid: a
            # top-N over every column had each scanning thread pin a block of every
            # column, the largest need of a replay's reads (a 1,024-GPU recording's
            # `gpu` table: over 16 MB at 2 threads and more per thread, against the
            # replay's 64 MB pool; this way under 14 MB, the same rows).
            chosen = [rowid for (rowid,) in cur.execute(
                f'SELECT rowid FROM "{table}" WHERE {after}ts <= ? '
                f"ORDER BY ts, host, seq LIMIT {READ_AHEAD_ROWS}",
                [*([] if frontier is None else [frontier]), until_ts + NEAR_MOVE_S],
            ).fetchall()]
            rows = self.fetch(cur, f'SELECT {kept_columns(table)} FROM "{table}" '
                                   "WHERE rowid IN (SELECT unnest(?::BIGINT[])) "
                                   "ORDER BY ts, host, seq",
                              [chosen]) if chosen else []
        hi: float | None = until_ts + NEAR_MOVE_S
        if len(rows) == READ_AHEAD_ROWS:
            # Cut by the limit: keep whole timestamps only, the last one may go on.
            cut = rows[-1]["ts"]
            rows = [r for r in rows if r["ts"] < cut]
            hi = rows[-1]["ts"] if rows else frontier
        if hi is None or hi < until_ts:
            self._ahead.pop(table, None)
            return None
        ahead = ReadAhead(frontier, hi, [r["ts"] for r in rows], rows)
        self._ahead[table] = ahead
        return ahead

    @contextmanager
    def _cur(self) -> Iterator[Any]:
        with self._read_cursor() as cur:
            yield cur

    @staticmethod
    def fetch(cur: Any, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cur.execute(sql, list(params))
        return ReaderBase._rows([d[0] for d in cur.description], cur.fetchall())

    @staticmethod
    def _rows(names: Sequence[str], found: Sequence[tuple[Any, ...]]) -> list[Row]:
        """`found`'s rows as dicts of `names` (a row wider than `names` leaves out the
        values past them), JSON columns decoded."""
        # Built by map, not `zip(..., strict=False)` per row: a keyword argument parsed
        # per row was a fifth of the time for the 1,024 rows a fleet's GPUs add each
        # second.
        rows: list[Row] = list(map(dict, map(zip, itertools.repeat(names), found)))
        for name in JSON_COLUMNS.intersection(names):  # decoded only where JSON can be
            for row in rows:
                value = row[name]
                if isinstance(value, str | bytes):
                    row[name] = _decode(name, value)
        return rows

    @staticmethod
    def scalar(cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        row = cur.execute(sql, list(params)).fetchone()
        return row[0] if row else None

    def reference_rank(self, cur: Any, job: str, cond: str, args: Sequence[Any],
                       ) -> tuple[Any, str, list[Any]]:
        """The job's lowest rank (its wall times are the job's: ranks wait on each other
        every step), with the SQL condition and arguments that select its records."""
        rank = self.scalar(cur, f"SELECT min(rank) FROM train WHERE job = ?{cond}",
                           [job, *args])
        if rank is None:
            return None, " AND rank IS NULL", []
        return rank, " AND rank = ?", [rank]

    def table_frontier(
        self, cur: Any, table: str, until_ts: float | None, where: str = "",
        params: Sequence[Any] = (),
    ) -> float | None:
        """Newest ts in `table` (at or before `until_ts`) matching `where`.

        Without a filter DuckDB answers max(ts) from row-group statistics; with one it
        must scan, so the filtered form is probed in widening windows.
        """
        if until_ts is None and not where:
            return self.scalar(cur, f'SELECT max(ts) FROM "{table}"')
        end = until_ts
        if end is None:
            end = self.scalar(cur, f'SELECT max(ts) FROM "{table}"')
            if end is None:
                return None
        for window in WINDOWS:
            sql = f'SELECT max(ts) FROM "{table}" WHERE ts <= ?' + where
            args: list[Any] = [end, *params]
            if window is not None:
                sql = f'SELECT max(ts) FROM "{table}" WHERE ts <= ? AND ts > ?' + where
                args = [end, end - window, *params]
            found = self.scalar(cur, sql, args)
            if found is not None:
                return float(found)
        return None

    def recent(
        self,
        cur: Any,
        table: str,
        *,
        until_ts: float | None,
        where: str = "",
        params: Sequence[Any] = (),
        columns: str = "*",
        order: str = "ts DESC, seq DESC",
        limit: int | None = None,
        qualify: str = "",
        enough: Callable[[list[Row]], bool] | None = None,
        windows: Sequence[float | None] = WINDOWS,
        frontiers: Frontiers | None = None,
    ) -> list[Row]:
        """Rows near the table's newest record, widening the window until `enough`
        (default: `limit` rows, or any row when there is no limit). `frontiers`, when
        given for the same `until_ts`, saves looking the newest record up again."""
        end = (frontiers.ts.get(table) if frontiers is not None
               else self.table_frontier(cur, table, until_ts))
        if end is None:
            return []
        satisfied = enough or (
            (lambda rows: len(rows) >= limit) if limit is not None else (lambda rows: bool(rows))
        )
        tail = (f" QUALIFY {qualify}" if qualify else "") + f" ORDER BY {order}"
        tail += f" LIMIT {int(limit)}" if limit is not None else ""
        rows: list[Row] = []
        for i, window in enumerate(windows):
            sql = f'SELECT {columns} FROM "{table}" WHERE ts <= ?'
            args: list[Any] = [end]
            if window is not None:
                sql += " AND ts > ?"
                args.append(end - window)
            rows = self.fetch(cur, sql + where + tail, [*args, *params])
            if window is None or satisfied(rows) or i == len(windows) - 1:
                return rows
        return rows

    def latest_per(
        self, cur: Any, table: str, keys: Sequence[str], *, until_ts: float | None,
        windows: Sequence[float | None] = WINDOWS, frontiers: Frontiers | None = None,
    ) -> list[Row]:
        """The newest row (by ts, then seq) of every `keys` group seen in the first
        window before the table's newest record that holds any row, ordered by `keys`.

        `arg_max` of the whole row per group costs about half of the equivalent
        `row_number()` window function, and this read runs on every refresh.
        """
        end = (frontiers.ts.get(table) if frontiers is not None
               else self.table_frontier(cur, table, until_ts))
        if end is None:
            return []
        group = ", ".join(f'r."{k}"' for k in keys)
        found: list[Any] = []
        for window in windows:
            sql = f'SELECT arg_max(r, (r.ts, r.seq)) FROM "{table}" AS r WHERE r.ts <= ?'
            args: list[Any] = [end]
            if window is not None:
                sql += " AND r.ts > ?"
                args.append(end - window)
            found = cur.execute(f"{sql} GROUP BY {group}", args).fetchall()
            if found:
                break
        rows = [row for (row,) in found]
        for name in JSON_COLUMNS.intersection(rows[0] if rows else ()):
            for row in rows:
                row[name] = _decode(name, row[name])
        return _ordered({tuple(r[k] for k in keys): r for r in rows}, keys)

    def latest_per_held(
        self, table: str, keys: Sequence[str], *, until_ts: float | None,
        windows: Sequence[float | None], frontiers: Frontiers,
    ) -> list[Row]:
        """`latest_per`, kept up to date from the rows added since (`kept`).

        The held answer knows every group whose newest row is newer than the window it
        was read in; an update is exact as long as the window chosen now starts no
        earlier than that (else it reads in full).
        """
        end = frontiers.ts.get(table)

        def read() -> tuple[dict[tuple, Row], float]:
            with self._cur() as cur:
                rows = self.latest_per(cur, table, keys, until_ts=until_ts,
                                       windows=windows, frontiers=frontiers)
            for name in NOT_KEPT.get(table, ()):  # as the rows it is kept up to date from
                for row in rows:
                    row.pop(name, None)
            complete_after = -math.inf
            if rows and end is not None:
                oldest = min(r["ts"] for r in rows)
                complete_after = next((end - w for w in windows
                                       if w is not None and oldest > end - w), -math.inf)
            return {tuple(r[k] for k in keys): r for r in rows}, complete_after

        def extend(held: tuple[dict[tuple, Row], float],
                   after: float) -> tuple[dict[tuple, Row], float] | None:
            by_key, complete_after = held
            if end is None:
                return None
            added = self.added_rows(table, after, until_ts, frontiers)
            if added is None:
                return None
            found = _fold_latest(keys, dict(by_key), added, end, windows, complete_after)
            return None if found is None else (found, complete_after)

        by_key, _ = self.kept(f"latest:{table}", (tuple(keys), tuple(windows)), table,
                              frontiers, read, extend)
        return _ordered(by_key, keys)

    def old_last_seen(self, cur: Any, host: str, end: float) -> float | None:
        """Newest record of a host that sent nothing within the widest bounded window.

        That needs an unbounded scan, so the answer is memoised: a value computed for
        cursor U0 still holds at cursor U when U0 <= U and U0 >= U - widest window,
        because the probe at U found nothing for this host after U - widest window.
        """
        widest = max(w for w in WINDOWS if w is not None)
        with self._memo_lock:
            memo = self._last_seen_memo.get(host)
        if memo is not None and end - widest <= memo[0] <= end:
            return memo[1]
        best: float | None = None
        for table in ("host_sample", "gpu", "hello", "train", "event"):
            found = self.scalar(
                cur, f'SELECT max(ts) FROM "{table}" WHERE host = ? AND ts <= ?', [host, end]
            )
            if found is not None and (best is None or found > best):
                best = float(found)
        if best is not None:
            with self._memo_lock:
                self._last_seen_memo[host] = (end, best)
        return best


def _fold_latest(keys: Sequence[str], by_key: dict[tuple, Row], added: Sequence[Row],
                 end: float, windows: Sequence[float | None],
                 complete_after: float) -> dict[tuple, Row] | None:
    """The newest row per group once `added` is folded into `by_key`, chosen as
    `latest_per` chooses (the first window holding any), or None when that window
    starts before what the held answer knew."""
    # A live fleet adds every GPU's sample each second: the key by one C call per row,
    # (ts, seq) compared without building a pair for each, and the groups all newer
    # than the window (the fleet's, each second) found by one C pass.
    pick = itemgetter(*keys)
    single = len(keys) == 1
    held = by_key.get
    for row in added:
        key = (pick(row),) if single else pick(row)
        old = held(key)
        if old is None:
            by_key[key] = row
            continue
        ts, old_ts = row["ts"], old["ts"]
        if ts > old_ts or (ts == old_ts and row["seq"] > old["seq"]):
            by_key[key] = row
    oldest = min(map(_TS, by_key.values()), default=None)
    for window in windows:
        floor = -math.inf if window is None else end - window
        chosen = by_key if oldest is not None and oldest > floor else \
            {k: r for k, r in by_key.items() if r["ts"] > floor}
        if chosen or window is None:
            return chosen if floor >= complete_after else None
    return None


_TS = itemgetter("ts")


def of_kinds(*kinds: str) -> Callable[[Row], bool]:
    """`event_version`'s `relevant` for a read of events of `kinds`."""
    wanted = frozenset(kinds)
    return lambda row: row.get("kind") in wanted
