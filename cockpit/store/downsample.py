"""Downsample stored series to at most `buckets` points: x, last, min, max per bucket.

This is the query behind every chart, run on each screen refresh, so its cost must not
grow with the length of the run, and a refresh asks for several series of one table
against the same x (loss, LR, AMP scale and step time of one rank) at once:
`downsample_rows` finds the x range and the replay frontier once for all of them and
reads every column in the same statement (`results` splits it per column).

For the series listed in `schema.LEVEL_SERIES` it reads the level rows (maintained at
insert time, `cockpit.store.levels`) whose bucket width is the largest power of four
not wider than the bucket the chart needs: about `buckets` rows per series key, merged
exactly into the chart's buckets, because the chart's bucket width is chosen as a
multiple of that level's width. Raw rows are read only where the level rows cannot
answer exactly, and always through simple range predicates on x (and ts) that DuckDB's
zone maps prune:

- the partial level buckets at the edges of an explicit `x_range`;
- with `until_ts` (a replay cursor), the level buckets that also hold later samples;
- a range narrower than `buckets` finest-level buckets (then the raw rows are few).

Rows stored but not folded into the level tables yet (`<table>_levels_pending`, a few
seconds of them, `cockpit.store.database.FOLD_INTERVAL`) are read as raw rows too,
filtered by the series' keys: rolling all of them up into level rows on every read
(`schema.levels_relation`) costs more than the rest of the chart query. A bucket may
then be answered by a level row and raw rows at once (or a raw range may hold pending
rows twice); min, max and the last value by x are unchanged by that.

Other series, or filters on columns that are not level keys, fall back to one GROUP BY
over the raw table.

Bucket `k` covers x in [k*w, (k+1)*w); the point's x is the largest x in the bucket,
`last` is the last non-null value (by x; of several at that x, as when every GPU of a
host reports at once, the largest), `lo`/`hi` the minimum and maximum. Buckets without
samples are absent. The tie rule makes `last` one value whatever order rows are read
in, so that a series extended from added rows equals a full read. Level rows hold one
series key each (one GPU, one rank), where two rows at the same x are a repeat: their
folds keep either (`cockpit.store.levels`), as a tie-breaking key would cost them five
times as much.

Over 500 lines because a downsampled read is one algorithm over two sources (the raw
rows and the level tables), whose queries and the fold of added rows
(`extend_downsampled`) must agree bucket for bucket.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from cockpit.store.schema import (
    LEVEL_BASE_BITS,
    LEVEL_BITS,
    LEVEL_COUNT,
    LEVEL_SERIES,
    RECORD_COLUMNS,
    levels_open_table,
    levels_table,
    pending_table,
)

Result = tuple[list[float], list[float | None], list[float | None], list[float | None]]
_KEY_COLUMNS = ("host", "seq", "ts")


def _level_width(level: int) -> int:
    return 1 << (LEVEL_BASE_BITS + LEVEL_BITS * level)


def _check_name(table: str, name: str, what: str) -> None:
    if name not in RECORD_COLUMNS[table] and name not in _KEY_COLUMNS:
        raise ValueError(f"{what} {name!r} is not a column of table {table!r}")


def _where_sql(where: Mapping[str, Any], params: dict[str, Any]) -> str:
    """`where` as SQL: a value is matched by equality, None by IS NULL, and a frozenset
    by being one of its members (`matches`)."""
    parts = []
    for i, (name, value) in enumerate(where.items()):
        if value is None:
            parts.append(f'"{name}" IS NULL')
        elif isinstance(value, frozenset):
            members = sorted(value, key=repr)
            for j, member in enumerate(members):
                params[f"w{i}_{j}"] = member
            listed = ", ".join(f"$w{i}_{j}" for j in range(len(members)))
            parts.append(f'"{name}" IN ({listed})' if members else "FALSE")
        else:
            params[f"w{i}"] = value
            parts.append(f'"{name}" = $w{i}')
    return " AND ".join(parts) if parts else "TRUE"


def selected(rows: Sequence[Mapping[str, Any]],
             where: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """The rows `where` selects, as `_where_sql` selects them (None matches NULL, a
    frozenset any of its members); `rows` itself, not a copy, when `where` is empty.
    One pass per condition rather than a call per row: a live fleet adds a thousand GPU
    rows a second, of which the job's hosts' few are kept."""
    kept = rows
    for name, value in where.items():
        if value is None:
            kept = [row for row in kept if row[name] is None]
        elif isinstance(value, frozenset):
            kept = [row for row in kept if row[name] in value]
        else:
            kept = [row for row in kept if row[name] == value]
    return kept


def downsample(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    *,
    x: str = "step",
    buckets: int = 120,
    where: Mapping[str, Any] | None = None,
    until_ts: float | None = None,
    x_range: tuple[float, float] | None = None,
) -> Result:
    """`(xs, last, lo, hi)` of `table.column` against `x`, at most `buckets` points.

    `where` filters by equality (e.g. `{"job": "j1", "rank": 0}`; a frozenset: one of its
    members, `{"host": frozenset({"n1", "n2"})}`); `until_ts` keeps only
    samples with ts <= until_ts (replay); `x_range` (inclusive) restricts x.
    """
    found = downsample_rows(cursor, table, (column,), x=x, buckets=buckets, where=where,
                            until_ts=until_ts, x_range=x_range)
    return results(found.rows, 1)[0]


@dataclass(frozen=True)
class Downsampled:
    """What a downsample read, kept so that a later read can extend it
    (`extend_downsampled`): rows of (bucket index, x, then last, lo, hi per column), in
    bucket order, and the plan they were read under."""

    rows: list[tuple[Any, ...]]
    x0: float | None = None
    x1: float | None = None
    level: int | None = None
    width: float = 1.0
    integer_x: bool = False
    # Per bucket built or grown from added rows over time: each column's x of its last
    # value (`extend_downsampled` merges a late sample into such a bucket exactly).
    last_x: Mapping[int, tuple[Any, ...]] = field(default_factory=dict)


def downsample_rows(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    columns: Sequence[str],
    *,
    x: str = "step",
    buckets: int = 120,
    where: Mapping[str, Any] | None = None,
    until_ts: float | None = None,
    x_range: tuple[float, float] | None = None,
) -> Downsampled:
    """`downsample` of several columns of one table under the same filter, with the
    plan they were read under.

    Every column has the same buckets (a bucket exists where a row does, whatever its
    values), answered by one extent lookup and one statement: what `downsample` would
    answer for each column alone (`results` splits the rows per column).
    """
    if table not in RECORD_COLUMNS:
        raise ValueError(f"no record table {table!r}")
    if not columns:
        raise ValueError("downsample needs at least one column")
    for column in columns:
        _check_name(table, column, "column")
    _check_name(table, x, "x")
    where = dict(where or {})
    for name in where:
        _check_name(table, name, "filter")
    buckets = max(1, int(buckets))
    spec = LEVEL_SERIES.get(table)
    use_levels = (
        spec is not None
        and spec["x"] == x
        and all(c in spec["columns"] for c in columns)
        and all(k in spec["keys"] and v is not None for k, v in where.items())
    )
    integer_x = RECORD_COLUMNS[table].get(x, "DOUBLE") in ("BIGINT", "INTEGER")
    if use_levels:
        extent = _level_extent(cursor, table, x, where, until_ts) if x_range is None else x_range
    else:
        extent = _raw_extent(cursor, table, x, where, until_ts) if x_range is None else x_range
    if extent is None or extent[0] is None or extent[1] is None:
        return Downsampled([])
    x0, x1 = float(extent[0]), float(extent[1])
    if until_ts is not None and x == "ts":
        x1 = min(x1, until_ts)
    if x1 < x0:
        return Downsampled([])
    level, width = plan(x1 - x0, buckets, integer_x=integer_x, levels=use_levels)
    if level is None:
        rows = _raw_query(cursor, table, columns, x, where, until_ts, x0, x1, width)
    else:
        rows = _level_query(cursor, table, columns, x, where, until_ts, x0, x1, width, level,
                            clip=x_range is not None, integer_x=integer_x)
    # An explicit range is not extended: its ends are the caller's, not the data's.
    return Downsampled(rows, x0, x1, level, width, integer_x) if x_range is None \
        else Downsampled(rows)


def extend_downsampled(
    held: Downsampled,
    added_rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    x: str,
    buckets: int,
    where: Mapping[str, Any],
    until_ts: float | None,
    reread: Callable[[float, float], Sequence[Mapping[str, Any]]] | None = None,
) -> Downsampled | None:
    """`held` brought up to date with the rows added since it was read
    (`ReaderBase.added_rows`), or None when only a full read can answer exactly.

    The added rows of the series (those matching `where`) are aggregated per bucket,
    as the raw statement would (`added_buckets`), and merged into the held buckets
    (`_merge_bucket`). Over steps, an added row at or before the x its bucket already
    reached (a job rolled back) sends the caller back to the full read; over time it
    is a sample a host sent late, merged by its x (a bucket as first read, the x of
    its lasts unknown, is read again alone: `reread`). A span grown enough to widen
    the buckets doubles their width (`plan`), and the held buckets merge into the
    wider ones exactly (`merge_buckets`). The result is what `downsample_rows` would
    answer now, without a statement of its own.
    """
    if not held.rows or held.x0 is None or held.x1 is None:
        return None
    n = len(columns)
    added = added_buckets(added_rows, columns, x=x, width=held.width, where=where,
                          last_x=True)
    if not added:
        return Downsampled(held.rows, held.x0, held.x1, held.level, held.width,
                           held.integer_x, held.last_x)
    if min(float(r[2]) for r in added) < held.x0:
        return None  # the series now starts earlier: another span, another plan
    by_tb = {int(r[0]): r for r in held.rows}
    last_x = dict(held.last_x)
    for row in added:
        tb = int(row[0])
        old = by_tb.get(tb)
        newest = row[3 + 3 * n:]
        if old is None:
            by_tb[tb] = (row[0], row[1], *row[3:3 + 3 * n])
            last_x[tb] = newest
            continue
        late = row[2] <= old[1]
        if late and x != "ts":
            return None  # an added row at or before what the bucket held: no clear last
        if late and tb not in last_x:
            # Over time, a sample a host sent after newer ones, into a bucket as read (the
            # x of each column's last unknown): that bucket alone is read again.
            again = None if reread is None else added_buckets(
                reread(tb * held.width, (tb + 1) * held.width), columns, x=x,
                width=held.width, where=where, last_x=True)
            if not again or int(again[0][0]) != tb:
                return None
            by_tb[tb] = (again[0][0], again[0][1], *again[0][3:3 + 3 * n])
            last_x[tb] = again[0][3 + 3 * n:]
            continue
        merged = _merge_bucket(old, row, n, last_x.get(tb) or (None,) * n, late)
        if merged is None:
            return None
        by_tb[tb], last_x[tb] = merged
    x1 = max(held.x1, float(added[-1][1]))
    ends = [x1] + ([until_ts] if x == "ts" and until_ts is not None else [])
    levels = held.level is not None
    planned = {plan(end - held.x0, buckets, integer_x=held.integer_x, levels=levels)
               for end in ends}
    if len(planned) > 1:
        return None
    ((level, width),) = planned
    rows = [by_tb[tb] for tb in sorted(by_tb)]
    if width != held.width:
        factor = _doubling(held.width, width)
        if factor is None:
            return None
        rows = merge_buckets(rows, len(columns), factor)
        last_x = {}  # the wide buckets' lasts come from narrow ones: x not carried
    return Downsampled(rows, held.x0, x1, level, width, held.integer_x, last_x)


def _merge_bucket(old: tuple[Any, ...], row: tuple[Any, ...], n: int,
                  held_xs: tuple[Any, ...], late: bool
                  ) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """A held bucket (bucket, x, last, lo, hi per column) and an added one
    (`added_buckets` with `last_x`) as one, with each column's x of its last value, or
    None where a late sample meets a held last whose x is not known."""
    newest = row[3 + 3 * n:]
    values: list[Any] = [old[0], max(row[1], old[1])]
    xs: list[Any] = []
    for i in range(n):
        last, lo, hi = row[3 + 3 * i: 6 + 3 * i]
        o_last, o_lo, o_hi = old[2 + 3 * i: 5 + 3 * i]
        if late:  # a sample a host sent after newer ones: the last by its x
            if o_last is not None and last is not None and held_xs[i] is None:
                return None
            pick, at = _last_of(o_last, held_xs[i], last, newest[i])
        else:
            pick, at = (o_last, held_xs[i]) if last is None else (last, newest[i])
        values += [pick,
                   o_lo if lo is None else lo if o_lo is None else min(lo, o_lo),
                   o_hi if hi is None else hi if o_hi is None else max(hi, o_hi)]
        xs.append(at)
    return tuple(values), tuple(xs)


def _last_of(held: Any, held_x: Any, added: Any, added_x: Any) -> tuple[Any, Any]:
    """The later of two last values by their x (the larger of two at one x), with its
    x, as the statements take a bucket's last; a missing one (None) loses."""
    if added is None:
        return held, held_x
    if held is None:
        return added, added_x
    if added_x > held_x:
        return added, added_x
    if added_x < held_x:
        return held, held_x
    return _top_of([held, added]), held_x


def _doubling(old: float, new: float) -> int | None:
    """`new / old` where it is a power of two `r` with `new == old * r` exactly, else
    None. Then `floor(x / new) == floor(x / old) // r` for every x (scaling a float by a
    power of two is exact), so buckets at `old` merge into those at `new` exactly."""
    if not new > old:
        return None
    factor = 1
    while old * factor < new and factor < 1 << 62:
        factor *= 2
    return factor if old * factor == new else None


def merge_buckets(rows: Sequence[tuple[Any, ...]], n_columns: int, factor: int
                  ) -> list[tuple[Any, ...]]:
    """Rows of (bucket, x, then last, lo, hi per column) in bucket order, at a bucket
    width `factor` times theirs: what the statements give at the wider width, as
    every wide bucket is the union of `factor` narrow ones (`_doubling`). Its x and
    each column's last value are those of its newest narrow bucket that has one (the
    narrow buckets follow one another in x), the minimum and maximum those of all of
    them under the statements' order (NaN above every number)."""
    out: list[tuple[Any, ...]] = []
    group: list[tuple[Any, ...]] = []

    def close() -> None:
        if len(group) == 1:
            out.append((int(group[0][0]) // factor, *group[0][1:]))
            return
        figures: list[Any] = [int(group[0][0]) // factor, group[-1][1]]
        for i in range(n_columns):
            lasts = [r[2 + 3 * i] for r in group if r[2 + 3 * i] is not None]
            los = [r[3 + 3 * i] for r in group if r[3 + 3 * i] is not None]
            his = [r[4 + 3 * i] for r in group if r[4 + 3 * i] is not None]
            figures += [lasts[-1] if lasts else None, _bottom_of(los) if los else None,
                        _top_of(his) if his else None]
        out.append(tuple(figures))

    for row in rows:
        if group and int(row[0]) // factor != int(group[0][0]) // factor:
            close()
            group = []
        group.append(row)
    if group:
        close()
    return out


def _top_of(values: list[Any]) -> Any:
    """The largest of a non-empty list without NULLs as DuckDB's max orders them: NaN,
    where there is one (it orders above every number), else the builtin max."""
    kept = [v for v in values if v == v]  # NaN alone is unequal to itself
    return max(values) if len(kept) == len(values) else next(v for v in values if v != v)


def _bottom_of(values: list[Any]) -> Any:
    """The smallest of a non-empty list without NULLs as DuckDB's min orders them: the
    least value that is not NaN (NaN only if all are)."""
    kept = [v for v in values if v == v]  # NaN alone is unequal to itself
    return min(kept) if kept else values[0]


def added_buckets(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, x: str,
                  width: float, where: Mapping[str, Any],
                  last_x: bool = False) -> list[tuple[Any, ...]]:
    """What the raw statement's GROUP BY gives for `rows` (records of the table, with
    every column): per bucket `floor(x / width)` of the rows matching `where` (None
    matches NULL), (bucket, largest x, smallest x, then per column the value at the
    largest x where it is not NULL (the largest of several there), its minimum and its
    maximum), in bucket order; with `last_x`, then each column's x of its last value.

    A handful of rows: cheaper folded here than planned as a statement. A live fleet
    adds a sample of every GPU each second (a thousand rows, most in one bucket): the
    rows are grouped by bucket first and each bucket's figures taken by the builtins
    over lists, not compared value by value."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for row in selected(rows, where):
        at = row[x]
        if at is None:
            continue
        tb = math.floor(at / width)
        group = groups.get(tb)
        if group is None:
            groups[tb] = [row]
        else:
            group.append(row)
    out: list[tuple[Any, ...]] = []
    for tb in sorted(groups):
        members = groups[tb]
        ats = [row[x] for row in members]
        figures: list[Any] = [tb, _top_of(ats), _bottom_of(ats)]
        newest_xs: list[Any] = []
        for column in columns:
            pairs = [(row[x], row[column]) for row in members if row[column] is not None]
            if not pairs:
                figures += [None, None, None]
                newest_xs.append(None)
                continue
            values = [value for _, value in pairs]
            newest = _top_of([at for at, _ in pairs])
            newest_xs.append(newest)
            # The statements' rule for the last value: the largest of those at the
            # largest x (x is never NaN here: a NaN x has no bucket).
            figures += [_top_of([value for at, value in pairs if at == newest]),
                        _bottom_of(values), _top_of(values)]
        out.append((*figures, *newest_xs) if last_x else tuple(figures))
    return out


def results(rows: Sequence[tuple[Any, ...]], n_columns: int) -> list[Result]:
    """Rows of (bucket, x, then last, lo, hi per column) as one result per column."""
    xs = [float(r[1]) for r in rows]
    out: list[Result] = []
    for i in range(n_columns):
        parts = [[None if r[k] is None else float(r[k]) for r in rows]
                 for k in (2 + 3 * i, 3 + 3 * i, 4 + 3 * i)]
        out.append((list(xs), parts[0], parts[1], parts[2]))
    return out


def plan(span: float, buckets: int, *, integer_x: bool, levels: bool) -> tuple[int | None, float]:
    """(level or None for raw rows, bucket width) for an x span shown in `buckets` points.

    The width is at least span / (buckets - 1), so buckets aligned to multiples of it
    number at most `buckets` (and at least half as many). It is a power of two (with a
    level: the level's width times 1, 2 or 4), over steps and over time alike.
    Powers of two keep the buckets where they are while the span grows, until it doubles
    (each bucket then holds two of the old ones): the spikes and the divergence found in
    these buckets do not come and go from one refresh to the next, and a held answer
    is carried to the doubled width by merging its buckets in pairs
    (`extend_downsampled`), not read again.
    """
    raw_width = span / max(buckets - 1, 1)
    if integer_x:
        raw_width = max(1.0, raw_width)
    best = None
    if levels:
        for level in range(LEVEL_COUNT):
            if _level_width(level) <= raw_width:
                best = level
    if best is None:
        if integer_x:
            return None, float(1 << (math.ceil(raw_width) - 1).bit_length())
        return None, _power_of_two_at_least(raw_width)
    lw = _level_width(best)
    multiple = max(1, math.ceil(raw_width / lw))
    return best, float(lw * (1 << (multiple - 1).bit_length()))


def _power_of_two_at_least(width: float) -> float:
    """The smallest power of two (2**k for any integer k) that is at least `width`."""
    if not width > 0 or not math.isfinite(width):
        return 1.0
    mantissa, exponent = math.frexp(width)  # width = mantissa * 2**exponent, 0.5 <= m < 1
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def _run(cursor: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> list[Any]:
    """Execute with the parameters `sql` names (DuckDB refuses unused named ones)."""
    used = set(re.findall(r"\$(\w+)", sql))
    return cursor.execute(sql, {k: v for k, v in params.items() if k in used}).fetchall()


def bucket_rows(cursor: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str], *,
                x: str, where: Mapping[str, Any], lo: float, hi: float,
                until_ts: float | None) -> list[dict[str, Any]]:
    """The raw rows of a series with `lo` <= x < `hi` (and ts <= `until_ts`): one
    bucket read again (`extend_downsampled`'s `reread`), for `added_buckets`."""
    for name in (x, *columns, *where):
        _check_name(table, name, "column")
    params: dict[str, Any] = {"lo": lo, "hi": hi}
    cond = _where_sql(where, params)
    if until_ts is not None:
        params["until"] = until_ts
        cond += " AND ts <= $until"
    names = [x, *columns, *where]
    listed = ", ".join(f'"{n}"' for n in names)
    rows = _run(cursor, f'SELECT {listed} FROM "{table}" '
                        f'WHERE "{x}" >= $lo AND "{x}" < $hi AND {cond}', params)
    return [dict(zip(names, row, strict=True)) for row in rows]


def _raw_extent(cursor: duckdb.DuckDBPyConnection, table: str, x: str,
                where: Mapping[str, Any], until_ts: float | None
                ) -> tuple[float, float] | None:
    params: dict[str, Any] = {}
    cond = _where_sql(where, params)
    if until_ts is not None:
        params["until"] = until_ts
        cond += " AND ts <= $until"
    (row,) = _run(cursor, f'SELECT min("{x}"), max("{x}") FROM "{table}" WHERE {cond}', params)
    return (row[0], row[1]) if row else None


def _level_rows(table: str, columns: Sequence[str] = ()) -> str:
    """The folded level rows of `table` (closed buckets and open ones) with the columns
    the queries below read; the pending rows are read raw (`_raw_part`)."""
    keys = list(LEVEL_SERIES[table]["keys"])
    values = [f"{c}_{part}" for c in columns for part in ("lo", "hi", "last", "lx")]
    names = ", ".join(f'"{n}"' for n in [*keys, "level", "bucket", "x_lo", "x_hi", "ts_hi",
                                           *values])
    return (f'(SELECT {names} FROM "{levels_table(table)}" UNION ALL '
            f'SELECT {names} FROM "{levels_open_table(table)}")')


def _level_extent(cursor: duckdb.DuckDBPyConnection, table: str, x: str,
                  where: Mapping[str, Any], until_ts: float | None
                  ) -> tuple[float, float] | None:
    params: dict[str, Any] = {"top": LEVEL_COUNT - 1}
    cond = _where_sql(where, params)
    lv = _level_rows(table)
    replay = until_ts is not None and x != "ts"
    done = "NULL"
    if replay:
        # Complete finest buckets give a lower bound of the newest x at the cursor.
        params["until"] = until_ts
        done = f"(SELECT max(x_hi) FROM {lv} WHERE level = 0 AND ts_hi <= $until AND {cond})"
    (row,) = _run(
        cursor,
        f"SELECT min(lo), max(hi), {done} FROM ("
        f"SELECT min(x_lo) AS lo, max(x_hi) AS hi FROM {lv} WHERE level = $top AND {cond} "
        f'UNION ALL SELECT min("{x}"), max("{x}") FROM "{pending_table(table)}" WHERE {cond})',
        params,
    )
    if not row or row[0] is None or not replay:
        return (row[0], row[1]) if row else None
    # Replay: raw rows beyond the bound, found through x and ts ranges, give the rest.
    bound = row[2] if row[2] is not None else row[0] - 1
    raw_params: dict[str, Any] = {"until": until_ts, "bound": bound}
    raw_cond = _where_sql(where, raw_params)
    (beyond,) = _run(
        cursor,
        f'SELECT max("{x}") FROM "{table}" WHERE "{x}" > $bound AND ts <= $until AND {raw_cond}',
        raw_params,
    )
    last = max(v for v in (bound, beyond[0] if beyond else None) if v is not None)
    return (row[0], last) if last >= row[0] else None


def _aggregates(columns: Sequence[str], x: str) -> str:
    return ", ".join(f'arg_max("{c}", ("{x}", "{c}")), min("{c}"), max("{c}")'
                     for c in columns)


def _raw_query(cursor: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str], x: str,
               where: Mapping[str, Any], until_ts: float | None, x0: float, x1: float,
               width: float) -> list[tuple[Any, ...]]:
    params: dict[str, Any] = {"x0": x0, "x1": x1, "w": width}
    cond = _where_sql(where, params)
    if until_ts is not None:
        params["until"] = until_ts
        cond += " AND ts <= $until"
    sql = (
        f'SELECT floor("{x}" / $w)::BIGINT AS tb, max("{x}"), {_aggregates(columns, x)} '
        f'FROM "{table}" WHERE "{x}" >= $x0 AND "{x}" <= $x1 AND {cond} GROUP BY tb ORDER BY tb'
    )
    return _run(cursor, sql, params)


def _raw_values(columns: Sequence[str], x: str) -> str:
    """Per column: value, x where the value is not null (for the last one), value."""
    return ", ".join(f'"{c}" AS v{i}, CASE WHEN "{c}" IS NOT NULL THEN "{x}" END AS l{i}'
                     for i, c in enumerate(columns))


def _raw_part(source: str, columns: Sequence[str], x: str, cond: str) -> str:
    """Raw rows shaped as level rows: (bucket, x, then last, x of last, lo, hi per column)."""
    values = ", ".join(
        f'"{c}", CASE WHEN "{c}" IS NOT NULL THEN "{x}" END, "{c}", "{c}"' for c in columns
    )
    return (f'SELECT floor("{x}" / $w)::BIGINT, "{x}", {values} FROM "{source}" '
            f'WHERE "{x}" >= $x0 AND "{x}" <= $x1 AND {cond}')


def _level_query(cursor: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str],
                 x: str, where: Mapping[str, Any], until_ts: float | None, x0: float,
                 x1: float, width: float, level: int, *,
                 clip: bool, integer_x: bool) -> list[tuple[Any, ...]]:
    lw = _level_width(level)
    mult = round(width / lw)
    lv = _level_rows(table, columns)
    params: dict[str, Any] = {"level": level, "m": mult, "w": width, "x0": x0, "x1": x1}
    cond = _where_sql(where, params)
    # Level buckets wholly inside [x0, x1]; with an explicit range the partial edge
    # buckets are read raw.
    b_lo = math.floor(x0 / lw)
    b_hi = math.floor(x1 / lw)
    raw_ranges: list[tuple[float, float]] = []  # half-open [a, b) of x, read raw
    if clip:
        if x0 > b_lo * lw:
            raw_ranges.append((x0, (b_lo + 1) * lw))
            b_lo += 1
        top = x1 + 1 if integer_x else x1
        if top < (b_hi + 1) * lw:
            raw_ranges.append((b_hi * lw, top if integer_x else math.nextafter(x1, math.inf)))
            b_hi -= 1
    params.update(b_lo=b_lo, b_hi=b_hi)
    frontier = ""
    if until_ts is not None and b_lo <= b_hi:
        params["until"] = until_ts
        (row,) = _run(
            cursor,
            f'SELECT min(bucket), max(bucket) FROM {_level_rows(table)} WHERE level = $level '
            f"AND {cond} AND bucket BETWEEN $b_lo AND $b_hi AND ts_hi > $until",
            params,
        )
        if row and row[0] is not None:
            params.update(f_lo=row[0], f_hi=row[1])
            frontier = " AND NOT (bucket BETWEEN $f_lo AND $f_hi)"
            raw_ranges.append((row[0] * lw, (row[1] + 1) * lw))
    values = ", ".join(
        f'"{c}_last" AS v{i}_last, "{c}_lx" AS v{i}_lx, "{c}_lo" AS v{i}_lo, '
        f'"{c}_hi" AS v{i}_hi'
        for i, c in enumerate(columns)
    )
    parts = [
        f"SELECT bucket // $m AS tb, x_hi AS xh, {values} FROM {lv} "
        f"WHERE level = $level AND {cond} AND bucket BETWEEN $b_lo AND $b_hi{frontier}"
    ]
    raw_cond = cond + (" AND ts <= $until" if until_ts is not None else "")
    if until_ts is not None:
        params["until"] = until_ts
    for i, (a, b) in enumerate(raw_ranges):
        params[f"ra{i}"], params[f"rb{i}"] = a, b
        parts.append(_raw_part(table, columns, x, f'"{x}" >= $ra{i} AND "{x}" < $rb{i} '
                                                  f"AND {raw_cond}"))
    parts.append(_raw_part(pending_table(table), columns, x, raw_cond))
    union = " UNION ALL ".join(parts)
    merged = ", ".join(f"arg_max(v{i}_last, (v{i}_lx, v{i}_last)), min(v{i}_lo), max(v{i}_hi)"
                       for i in range(len(columns)))
    sql = f"SELECT tb, max(xh), {merged} FROM ({union}) GROUP BY tb ORDER BY tb"
    return _run(cursor, sql, params)
