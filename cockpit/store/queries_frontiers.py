"""Where every record table ends at a cursor, found in one or two round trips.

A screen refresh needs the newest ts of each table at the cursor, both to bound its
"recent" reads and to tell which remembered answers still hold (`ReaderBase.memo`):
for a given store, (newest ts at or before the cursor, rows in the table) changes
whenever the rows a read can see change. One statement asks every table at once,
each part a scalar subquery DuckDB plans on its own: `count(*)` comes from table
metadata, and `max(ts)` over a window before the cursor reads only the row groups
whose zone maps overlap it. Tables with nothing in the window are asked again over a
wider one; tables known to be small are asked without a window from the start.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# A table this small is scanned whole rather than probed window by window.
SMALL_TABLE_ROWS = 50_000


# A stored row as the store names it: its host and that host's journal number, unique
# across every record table of a store.
RowName = tuple[str, int]


@dataclass(frozen=True)
class Frontiers:
    """Per record table: newest ts at or before `until_ts`, and rows stored.

    Probed live (`until_ts` None), also each table's newest row id (`ids`): DuckDB
    numbers a table's rows in the order they were stored, so the rows stored between
    two probes are those numbered between them (`ReaderBase.added_after`), whatever
    their ts. `anchors`: the name of the row at that id, for the tables a probe was
    asked to name it of (see `_probe_newest`).
    """

    until_ts: float | None
    ts: Mapping[str, float | None]
    rows: Mapping[str, int]
    ids: Mapping[str, int] = field(default_factory=dict)
    anchors: Mapping[str, RowName] = field(default_factory=dict)

    @property
    def newest(self) -> float | None:
        known = [t for t in self.ts.values() if t is not None]
        return max(known) if known else None

    def key(self, *tables: str) -> tuple[Any, ...]:
        """Identifies the rows of `tables` visible at the cursor (for `ReaderBase.memo`)."""
        return tuple((t, self.ts.get(t), self.rows.get(t)) for t in tables)


def probe_frontiers(
    cur: Any,
    tables: Sequence[str],
    until_ts: float | None,
    windows: Sequence[float | None],
    sizes: Mapping[str, int],
    previous: Frontiers | None = None,
    unanchored: Collection[str] = (),
) -> Frontiers:
    """Frontiers of `tables`; `sizes` (rows per table, possibly stale) picks which
    tables are probed in windows and which are scanned whole. `previous`: the last
    frontiers found of the whole store (`until_ts` None), from which a live store's
    newest rows are looked for (`_probe_newest`), which names the newest row of the
    tables in `unanchored`."""
    if until_ts is None:
        return _probe_newest(cur, tables, previous, unanchored)
    rows: dict[str, int] = {}
    ts: dict[str, float | None] = {}
    pending = list(tables)
    for i, window in enumerate(windows):
        parts: list[str] = []
        args: list[object] = []
        whole: set[str] = set()
        for t in pending:
            count = f'(SELECT count(*) FROM "{t}")' if i == 0 else "NULL"
            if window is None or sizes.get(t, SMALL_TABLE_ROWS + 1) <= SMALL_TABLE_ROWS:
                whole.add(t)
                parts.append(f"SELECT '{t}', {count}, (SELECT max(ts) FROM \"{t}\" "
                             "WHERE ts <= ?)")
                args.append(until_ts)
            else:
                parts.append(f"SELECT '{t}', {count}, (SELECT max(ts) FROM \"{t}\" "
                             "WHERE ts <= ? AND ts > ?)")
                args += [until_ts, until_ts - window]
        for t, n, hi in cur.execute(" UNION ALL ".join(parts), args).fetchall():
            if n is not None:
                rows[t] = int(n)
            if hi is not None or t in whole or not rows.get(t):
                ts[t] = _float(hi)
        pending = [t for t in pending if t not in ts]
        if not pending:
            break
    for t in pending:
        ts[t] = None
    return Frontiers(until_ts, ts, rows)


def _probe_newest(cur: Any, tables: Sequence[str], previous: Frontiers | None,
                  unanchored: Collection[str] = ()) -> Frontiers:
    """Every table's row count, newest ts and newest row id, over the whole store, and
    the name of that row for the tables in `unanchored`.

    A live store grows for days, and `max(ts)` over a whole table reads every row of
    it: tens of milliseconds a table at tens of millions of rows, at every refresh. Rows
    are appended, numbered one after another in the order they are stored, so only the
    rows numbered after the previous probe's newest are asked (DuckDB reads just the
    row groups that hold them): the newest ts is theirs or the previous one. Where the
    table does not hold the previous rows and those (rows were deleted or filed away
    since), it is asked whole.

    A row's name is asked only where the reader holds none for the previous newest
    (`ReaderBase.frontiers`), as a refresh's read of the rows added names the newest
    row anyway: where it is not asked, its column is NULL (each aggregate a part adds
    costs every refresh about 0.2 ms).
    """
    known = previous if previous is not None and previous.until_ts is None else None
    known_ids = known.ids if known is not None else {}
    parts: list[str] = []
    args: list[object] = []
    for t in tables:
        top = known_ids.get(t)
        parts.append(_newest_part(t, t in unanchored, top is not None))
        if top is not None:
            args.append(top)
    ts: dict[str, float | None] = {}
    rows: dict[str, int] = {}
    ids: dict[str, int] = {}
    anchors: dict[str, RowName] = {}

    def take(t: str, hi: Any, top: Any, name: Any, old: int | None) -> None:
        if old is None:  # asked whole
            ts[t] = _float(hi)
        else:  # asked from the previous newest id: nothing newer keeps the previous ts
            newest = known.ts.get(t) if known is not None else None
            ts[t] = newest if hi is None else max(float(hi), newest or -math.inf)
        if top is not None:
            ids[t] = int(top)
            if name is not None:
                anchors[t] = (str(name["host"]), int(name["seq"]))
        elif old is not None:
            ids[t] = old

    whole: list[str] = []
    for t, n, hi, top, name in cur.execute(" UNION ALL ".join(parts), args).fetchall():
        rows[t] = int(n)
        old = known_ids.get(t)
        new = 0 if old is None or top is None else int(top) - old
        if known is not None and old is not None and rows[t] != known.rows.get(t, -1) + new:
            whole.append(t)  # rows went away: the previous ones are no guide
        else:
            take(t, hi, top, name, old)
    if whole:
        again = " UNION ALL ".join(_newest_part(t, t in unanchored, False) for t in whole)
        for t, _, hi, top, name in cur.execute(again).fetchall():
            take(t, hi, top, name, None)
    return Frontiers(None, ts, rows, ids, anchors)


def carried_over(previous: Frontiers, found: Frontiers, tables: Sequence[str]) -> Frontiers:
    """`found` (a live probe of some tables) with the other `tables` as `previous` had
    them: tables no write changed since (`cockpit.store.versions`)."""
    def pick(t: str) -> Frontiers:
        return found if t in found.rows else previous

    return Frontiers(
        None,
        {t: pick(t).ts.get(t) for t in tables},
        {t: n for t in tables if (n := pick(t).rows.get(t)) is not None},
        {t: i for t in tables if (i := pick(t).ids.get(t)) is not None},
        dict(found.anchors),
    )


def _newest_part(table: str, name: bool, after: bool) -> str:
    """`_probe_newest`'s part for one table: its count, the newest ts and id of the rows
    numbered after the `?` (`after`) or of all, and the newest one's host and seq
    (`name`) or NULL.

    Named, the rows from the `?` on are asked, the previous newest among them: where
    no row came since, that one is still the newest, and its name is the one wanted
    (its ts is the previous frontier's or older, so the answer is unchanged)."""
    named = "arg_max({'host': host, 'seq': seq}, rowid)" if name else "NULL"
    where = (" WHERE rowid >= ?" if name else " WHERE rowid > ?") if after else ""
    return (f"SELECT '{table}', (SELECT count(*) FROM \"{table}\"), s.* FROM "
            f'(SELECT max(ts), max(rowid), {named} FROM "{table}"{where}) AS s')


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class ReadAhead:
    """A replay's rows of one table just past its cursor, read ahead of it.

    Holds every row with `lo` < ts <= `hi`, in ts order; `lo` is the table's frontier
    when they were read (None: the table had no row yet). While the cursor moves within
    that range, the table's frontier, its next row and the rows the cursor moved over
    come from here rather than from statements: a replay refresh otherwise asks DuckDB
    the same three questions of each table for a second's worth of rows.
    """

    lo: float | None
    hi: float
    ts: list[float]
    rows: list[dict[str, Any]]

    def covers(self, after: float | None, until: float) -> bool:
        """Whether every row with `after` (None: the start) < ts <= `until` is here."""
        if after is None:
            return self.lo is None and until <= self.hi
        return (self.lo is None or self.lo <= after) and after <= until <= self.hi

    def between(self, after: float, until: float) -> list[dict[str, Any]]:
        """The rows with `after` < ts <= `until` (within the range held)."""
        return self.rows[bisect_right(self.ts, after):bisect_right(self.ts, until)]

    def frontier(self, until: float) -> float | None:
        """The table's newest ts at or before `until` (within the range held)."""
        at = bisect_right(self.ts, until)
        return self.ts[at - 1] if at else self.lo

    def next_after(self, until: float) -> float:
        """A ts before which the table has no row after `until`: its next row, or the
        end of the range held."""
        at = bisect_right(self.ts, until)
        return self.ts[at] if at < len(self.ts) else self.hi


def probe_next(cur: Any, tables: Sequence[str], until_ts: float) -> dict[str, float | None]:
    """Per table, the oldest ts after `until_ts` (None: nothing after it): until the
    cursor reaches it, the table's frontier cannot move."""
    parts = " UNION ALL ".join(
        f"SELECT '{t}', (SELECT min(ts) FROM \"{t}\" WHERE ts > ?)" for t in tables
    )
    found = cur.execute(parts, [until_ts] * len(tables)).fetchall()
    return {t: _float(v) for t, v in found}


def probe_ahead(cur: Any, since: Mapping[str, float], until_ts: float,
                ahead: float) -> tuple[dict[str, float | None], dict[str, float]]:
    """For tables whose frontier was `since[t]` at an earlier cursor (<= `until_ts`):
    their frontier now, and a ts before which they have no row after `until_ts` (their
    next row, or `until_ts + ahead` when there is none that close).

    One statement, each part a range read from the old frontier to a little past the
    cursor, which zone maps bound to the rows a replay just moved over.
    """
    parts, args = [], []
    for t, lo in since.items():
        parts.append(f"SELECT '{t}', max(ts) FILTER (WHERE ts <= ?), "
                     f"min(ts) FILTER (WHERE ts > ?) FROM \"{t}\" WHERE ts >= ? AND ts <= ?")
        args += [until_ts, until_ts, lo, until_ts + ahead]
    frontier: dict[str, float | None] = {}
    nexts: dict[str, float] = {}
    for t, hi, nxt in cur.execute(" UNION ALL ".join(parts), args).fetchall():
        frontier[t] = _float(hi) if hi is not None else since[t]
        nexts[t] = float(nxt) if nxt is not None else until_ts + ahead
    return frontier, nexts
