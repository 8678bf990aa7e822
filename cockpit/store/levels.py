"""Keep the level tables (schema.LEVEL_SERIES) current as records are inserted.

A chart of a month-long run must not scan the month: the downsampling query reads, per
series key, about `buckets` rows from the one level whose bucket width fits the range
(`cockpit.store.downsample`). Each level row holds count, x range, newest ts and, per
value column, min, max, the last non-null value and the x of that value, which is enough
to merge partial buckets exactly: a flush aggregates its new rows once at the finest
level and derives every coarser level from that.

The cost per flush is proportional to the rows it adds and to the number of series, not
to the length of the run. When a flush loaded a table from one host, its new rows are
found by their (host, seq) range, which the zone maps of the insertion-ordered `seq`
column prune; when it loaded several hosts (whose seq ranges need not be anywhere near
each other, so a seq range would prune nothing) the rows come from the flush's own temp
table (`fold_staged`). Their level rows merge into the open bucket of their series and
level (`<table>_levels_open`, one row each); a bucket that closes is appended to
`<table>_levels`, which a flush never reads unless a row arrives for a bucket older than
its series' open one. Both tables live in the store, in the flush's transaction, so
nothing needs rebuilding after a restart and a failed flush leaves no trace.

Appends leave a level table in arrival order, so `level = L` would scan every row group.
A live session re-clusters each level table hourly once it has grown by a row group
since its last rewrite (`Store.recluster_levels`): it copies the table ordered by
(level, keys, bucket) without holding up ingest, then swaps the copy in. The zone maps
then confine a chart query to its level's row groups, plus at most about a row group of
unclustered rows added since.
"""

from __future__ import annotations

from typing import NamedTuple

import duckdb

from cockpit.store.schema import (
    LEVEL_BASE_BITS,
    LEVEL_BITS,
    LEVEL_COUNT,
    LEVEL_SERIES,
    levels_ddl,
    levels_open_table,
    levels_table,
    pending_columns,
    pending_table,
)

_NULL_KEY = {"VARCHAR": "''", "INTEGER": "-1"}


# Where a fold finds its new rows: a (host, seq) range of the table, or a staged relation.
_FROM_TABLE = (
    "r AS (SELECT unnest($hosts) AS host, unnest($los) AS lo), "
    'new AS (SELECT {{cols}} FROM "{table}" t JOIN r ON t.host = r.host '
    "WHERE t.seq >= r.lo AND t.seq >= $min_lo AND {{has_x}})"
)
_FROM_STAGED = 'new AS (SELECT {{cols}} FROM "{staged}" t WHERE {{has_x}})'
_ROWS_FROM_TABLE = (
    'SELECT {names} FROM "{table}" t JOIN (SELECT unnest($hosts) AS host, unnest($los) AS lo) r '
    "ON t.host = r.host WHERE t.seq >= r.lo AND t.seq >= $min_lo"
)


_DELTA = "cockpit_level_delta"  # temp tables of the folding connection
_REST = "cockpit_level_rest"
_LATE = "cockpit_level_late"


class _FoldSql(NamedTuple):
    delta: str  # stage the flush's level rows, one per (keys, level, bucket)
    merge_open: str  # merge those that fall in their series' open bucket
    rest: str  # stage the others, each with its open bucket and newest delta bucket
    counts: str  # (late rows, open buckets that close)
    late: str  # stage the late rows, each with its closed bucket's row (reads the table)
    late_update: str  # merge late rows into their closed buckets
    late_insert: str  # and insert those that found none
    close_passed: str  # append the delta buckets that are already closed
    close_open: str  # append the open buckets that close
    reopen: str  # move each closing series' open row to its newest bucket
    open_new: str  # open the first bucket of a new series


def _fold_sql(table: str, source: str) -> _FoldSql:
    """The statements that fold a flush into `table`'s level tables.

    The closed buckets (`<table>_levels`) are only appended to, and the newest bucket of
    each series and level is rewritten in `<table>_levels_open`, a table bounded by the
    number of series: so no statement of the usual flush reads the closed table, whose
    size grows with the run (a hash join against it reads all of it, +35 ms per flush
    per 2 M rows, measured). Only rows older than their series' open bucket (a training
    run resumed from an earlier step) merge into the closed table, by join.

    Merging into the open rows is an UPDATE from the delta rather than an INSERT .. ON
    CONFLICT DO UPDATE: DuckDB plans the upsert as a MERGE that first groups its whole
    input by key again to reject duplicate keys, which costs more than the rollup
    itself. The rollup's rows are unique per key by construction, so the UPDATE is
    exact, and it is all a flush does when every delta row found its open bucket (most
    flushes: a level-0 bucket is 64 seconds wide). A series key whose new rows fall in
    one finest bucket (again most flushes of a fleet sampling at 1 Hz) has exactly one
    row per level, taken as is instead of through a second aggregation.
    """
    # Over 80 lines: the SQL of one fold, its column lists first and then its statements
    # in the order DuckDB runs them; each statement reads the lists built above it.
    spec = LEVEL_SERIES[table]
    keys: dict[str, str] = spec["keys"]
    columns: tuple[str, ...] = spec["columns"]
    x = spec["x"]
    closed = levels_table(table)
    opened = levels_open_table(table)
    key_names = ", ".join(f'"{k}"' for k in keys)
    new_keys = ", ".join(f'coalesce(t."{k}", {_NULL_KEY[typ]}) AS "{k}"' for k, typ in keys.items())
    new_cols = ", ".join(f't."{c}"::DOUBLE AS "{c}"' for c in columns)
    base_cols = ", ".join(
        f'min("{c}") AS "{c}_lo", max("{c}") AS "{c}_hi", arg_max("{c}", x) AS "{c}_last", '
        f'max(x) FILTER (WHERE "{c}" IS NOT NULL) AS "{c}_lx"'
        for c in columns
    )
    level_cols = ", ".join(
        f'min("{c}_lo") AS "{c}_lo", max("{c}_hi") AS "{c}_hi", '
        f'arg_max("{c}_last", "{c}_lx") AS "{c}_last", max("{c}_lx") AS "{c}_lx"'
        for c in columns
    )
    value_names = ["n", "x_lo", "x_hi", "ts_hi",
                   *(f"{c}_{part}" for c in columns for part in ("lo", "hi", "last", "lx"))]
    plain_cols = ", ".join(f'"{name}"' for name in value_names[4:])
    all_names = [*(f'"{k}"' for k in keys), "level", "bucket", *(f'"{n}"' for n in value_names)]
    all_cols = ", ".join(all_names)
    late_cols = ", ".join(f"e.{name}" for name in all_names)
    merges = ", ".join(
        [
            "n = d.n + e.n",
            "x_lo = least(d.x_lo, e.x_lo)",
            "x_hi = greatest(d.x_hi, e.x_hi)",
            "ts_hi = greatest(d.ts_hi, e.ts_hi)",
        ]
        + [
            f'"{c}_lo" = least(d."{c}_lo", e."{c}_lo"), '
            f'"{c}_hi" = greatest(d."{c}_hi", e."{c}_hi"), '
            f'"{c}_last" = CASE WHEN e."{c}_lx" IS NOT NULL AND '
            f'(d."{c}_lx" IS NULL OR e."{c}_lx" >= d."{c}_lx") '
            f'THEN e."{c}_last" ELSE d."{c}_last" END, '
            f'"{c}_lx" = greatest(d."{c}_lx", e."{c}_lx")'
            for c in columns
        ]
    )
    series = " AND ".join(f'd."{k}" = e."{k}"' for k in [*keys, "level"])
    match = f"{series} AND d.bucket = e.bucket"
    replaced = ", ".join(f'"{name}" = e."{name}"' for name in ["bucket", *value_names])
    rollup = f"""
WITH {source.format(cols=f'{new_keys}, t."{x}"::DOUBLE AS x, t.ts, {new_cols}',
                    has_x=f't."{x}" IS NOT NULL')},
base AS (
    SELECT {key_names}, floor(x / {1 << LEVEL_BASE_BITS})::BIGINT AS b0, count(*) AS n,
        min(x) AS x_lo, max(x) AS x_hi, max(ts) AS ts_hi, {base_cols},
        count(*) OVER (PARTITION BY {key_names}) AS buckets
    FROM new GROUP BY {key_names}, b0
)
SELECT {key_names}, l AS level, b0 >> ({LEVEL_BITS} * l) AS bucket, n::BIGINT AS n,
    x_lo, x_hi, ts_hi, {plain_cols}
FROM base CROSS JOIN range({LEVEL_COUNT}) lv(l) WHERE buckets = 1
UNION ALL
SELECT {key_names}, l AS level, b0 >> ({LEVEL_BITS} * l) AS bucket, sum(n)::BIGINT AS n,
    min(x_lo) AS x_lo, max(x_hi) AS x_hi, max(ts_hi) AS ts_hi, {level_cols}
FROM base CROSS JOIN range({LEVEL_COUNT}) lv(l) WHERE buckets > 1
GROUP BY ALL
"""
    # Each delta row carries the row id of the open bucket it merges into, and the delta
    # is stored in that order, so the merge updates the open table in its row order.
    # DuckDB applies an UPDATE in the order its join emits rows; in the order of a hash
    # aggregate (when the delta is the larger side: every flush that closes buckets) the
    # same 28 k-row update took 5 s instead of 40 ms (measured, 2,048 GPUs).
    delta = (f"CREATE OR REPLACE TEMP TABLE {_DELTA} AS SELECT e.*, d.rowid AS rid "
             f'FROM ({rollup}) AS e LEFT JOIN "{opened}" AS d ON {match} ORDER BY rid')
    # The open bucket of a series holds its newest x: a delta row past it closes it.
    rest = f"""
CREATE OR REPLACE TEMP TABLE {_REST} AS
SELECT e.*, d.bucket AS open_bucket, d.rowid AS open_rid,
    max(e.bucket) OVER (PARTITION BY {", ".join(f'e."{k}"' for k in keys)}, e.level) AS newest
FROM {_DELTA} AS e LEFT JOIN "{opened}" AS d ON {series}
WHERE d.bucket IS NULL OR d.bucket <> e.bucket
ORDER BY open_rid
"""
    ahead = "(open_bucket IS NULL OR bucket > open_bucket)"
    return _FoldSql(
        delta=delta,
        merge_open=(f'UPDATE "{opened}" AS d SET {merges} FROM {_DELTA} AS e '
                    "WHERE d.rowid = e.rid"),
        rest=rest,
        counts=(f"SELECT count(*) FILTER (WHERE bucket < open_bucket), "
                f"count(*) FILTER (WHERE bucket > open_bucket AND bucket = newest) "
                f"FROM {_REST}"),
        late=(f"CREATE OR REPLACE TEMP TABLE {_LATE} AS SELECT {late_cols}, "
              f'd.rowid AS closed_rid FROM {_REST} AS e LEFT JOIN "{closed}" AS d ON {match} '
              "WHERE e.bucket < e.open_bucket ORDER BY closed_rid"),
        late_update=(f'UPDATE "{closed}" AS d SET {merges} FROM {_LATE} AS e '
                     "WHERE d.rowid = e.closed_rid"),
        late_insert=(f'INSERT INTO "{closed}" SELECT {all_cols} FROM {_LATE} '
                     "WHERE closed_rid IS NULL"),
        close_passed=(f'INSERT INTO "{closed}" SELECT {all_cols} FROM {_REST} '
                      f"WHERE {ahead} AND bucket < newest"),
        close_open=(f'INSERT INTO "{closed}" SELECT d.* FROM "{opened}" AS d WHERE EXISTS '
                    f"(SELECT 1 FROM {_REST} AS e WHERE {series} "
                    "AND e.bucket > e.open_bucket AND e.bucket = e.newest)"),
        reopen=(f'UPDATE "{opened}" AS d SET {replaced} FROM {_REST} AS e '
                "WHERE d.rowid = e.open_rid AND e.bucket > e.open_bucket "
                "AND e.bucket = e.newest"),
        open_new=(f'INSERT INTO "{opened}" SELECT {all_cols} FROM {_REST} '
                  "WHERE open_bucket IS NULL AND bucket = newest"),
    )


def _fold(cur: duckdb.DuckDBPyConnection, sql: _FoldSql,
          params: dict[str, object] | None = None) -> bool:
    """Run a fold; True when it merged rows into closed buckets in place (late rows)."""
    created = cur.execute(sql.delta, params or {}).fetchone()
    if not created or not created[0]:
        return False
    merged = cur.execute(sql.merge_open).fetchone()
    if merged and int(merged[0]) == int(created[0]):
        return False
    cur.execute(sql.rest)
    late, closing = cur.execute(sql.counts).fetchone() or (0, 0)
    if late:
        cur.execute(sql.late)
        updated = cur.execute(sql.late_update).fetchone()
        if not updated or int(updated[0]) < int(late):
            cur.execute(sql.late_insert)
    cur.execute(sql.close_passed)
    if closing:
        cur.execute(sql.close_open)
        cur.execute(sql.reopen)
    cur.execute(sql.open_new)
    return bool(late)


_UPDATES = {table: _fold_sql(table, _FROM_TABLE.format(table=table)) for table in LEVEL_SERIES}


_PENDING = {
    table: _fold_sql(table, _FROM_STAGED.format(staged=pending_table(table)))
    for table in LEVEL_SERIES
}


def _pending_names(table: str, prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in pending_columns(table))


def update_levels(
    cur: duckdb.DuckDBPyConnection, table: str, first_new_seq: dict[str, int]
) -> bool:
    """Fold the rows of `table` with seq >= first_new_seq[host] into its level table.

    Like every fold, returns True when late rows were merged into closed buckets.
    """
    if table not in _UPDATES or not first_new_seq:
        return False
    hosts = list(first_new_seq)
    los = [first_new_seq[h] for h in hosts]
    return _fold(cur, _UPDATES[table], {"hosts": hosts, "los": los, "min_lo": min(los)})


def defer_levels(
    cur: duckdb.DuckDBPyConnection, table: str, first_new_seq: dict[str, int]
) -> int:
    """Park the rows of `table` with seq >= first_new_seq[host] until the next fold.

    Returns how many rows were parked.
    """
    if table not in LEVEL_SERIES or not first_new_seq:
        return 0
    hosts = list(first_new_seq)
    los = [first_new_seq[h] for h in hosts]
    rows = _ROWS_FROM_TABLE.format(names=_pending_names(table, "t."), table=table)
    return _inserted(cur.execute(
        f'INSERT INTO "{pending_table(table)}" {rows}',
        {"hosts": hosts, "los": los, "min_lo": min(los)},
    ))


def defer_staged(cur: duckdb.DuckDBPyConnection, table: str, staged: str) -> int:
    """Park every row of `staged` (a relation with `table`'s columns) until the next fold."""
    if table not in LEVEL_SERIES:
        return 0
    return _inserted(cur.execute(
        f'INSERT INTO "{pending_table(table)}" SELECT {_pending_names(table)} FROM "{staged}"'
    ))


def fold_pending(cur: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Fold `table`'s parked rows into its level tables and empty the parking table."""
    if table not in LEVEL_SERIES:
        return False
    late = _fold(cur, _PENDING[table])
    cur.execute(f'DELETE FROM "{pending_table(table)}"')
    return late


def _inserted(cur: duckdb.DuckDBPyConnection) -> int:
    row = cur.fetchone()
    return int(row[0]) if row else 0


# A level table re-clustered less than this many rows ago is left as it is: a chart query
# then scans at most one unclustered row group besides the clustered ones, while a
# rewrite costs the whole table (21 s for 7 M gpu level rows, measured: a month of 128
# GPUs, which adds about 10 k level rows an hour).
CLUSTER_MIN_NEW_ROWS = 122_880


def clustered_copy(table: str) -> str:
    """The table a re-clustering writes `table`'s level rows into before the swap."""
    return f"{levels_table(table)}__clustered"


def _cluster_order(table: str) -> str:
    keys = LEVEL_SERIES[table]["keys"]
    return ", ".join(["level", *(f'"{k}"' for k in keys), "bucket"])


def copy_clustered(cur: duckdb.DuckDBPyConnection, table: str) -> None:
    """Write `table`'s closed level rows, as `cur`'s transaction sees them, into a new
    table ordered by (level, keys, bucket): the long part of a re-clustering."""
    copy = clustered_copy(table)
    cur.execute(f'DROP TABLE IF EXISTS "{copy}"')
    cur.execute(levels_ddl(table, copy))
    cur.execute(f'INSERT INTO "{copy}" SELECT * FROM "{levels_table(table)}" '
                f"ORDER BY {_cluster_order(table)}")


def swap_clustered(cur: duckdb.DuckDBPyConnection, table: str,
                   copied_up_to: int | None = None) -> None:
    """Replace `table`'s level table by its clustered copy, first appending the rows
    added since the copy was taken (row id above `copied_up_to`: closed level rows are
    only ever appended, or merged in place by a late row, which the caller rules out).
    Without `copied_up_to` the copy was taken in this transaction: nothing was added.
    """
    name = levels_table(table)
    if copied_up_to is not None:
        cur.execute(f'INSERT INTO "{clustered_copy(table)}" SELECT * FROM "{name}" '
                    f"WHERE rowid > $top ORDER BY {_cluster_order(table)}",
                    {"top": copied_up_to})
    cur.execute(f'DROP TABLE "{name}"')
    cur.execute(f'ALTER TABLE "{clustered_copy(table)}" RENAME TO "{name}"')


def cluster_levels(cur: duckdb.DuckDBPyConnection) -> None:
    """Rewrite every closed-bucket level table ordered by (level, keys, bucket) inside
    `cur`'s transaction (the open-bucket tables are small and rewritten by every flush).

    This holds up every other writer for as long as the rewrite takes (benchmarks and
    tests preparing a store); a live session uses `Store.recluster_levels`, which copies
    outside the write lock.
    """
    for table in LEVEL_SERIES:
        copy_clustered(cur, table)
        swap_clustered(cur, table)


def fold_staged(cur: duckdb.DuckDBPyConnection, table: str, staged: str) -> bool:
    """Fold every row of `staged` (a relation with `table`'s columns) into its level table."""
    if table not in LEVEL_SERIES:
        return False
    return _fold(cur, _fold_sql(table, _FROM_STAGED.format(staged=staged)))
