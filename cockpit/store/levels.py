"""Keep the level tables (schema.LEVEL_SERIES) current as records are inserted.

A chart of a month-long run must not scan the month: the downsampling query reads, per
series key, about `buckets` rows from the one level whose bucket width fits the range
(`cockpit.store.downsample`). Each level row holds count, x range, newest ts and, per
value column, min, max, the last non-null value and the x of that value, which is enough
to merge partial buckets exactly: a flush aggregates its new rows once at the finest
level, derives every coarser level from that, and upserts.

The cost per flush is proportional to the rows it adds, not to the table size. When a
flush loaded a table from one host, its new rows are found by their (host, seq) range,
which the zone maps of the insertion-ordered `seq` column prune; when it loaded several
hosts (whose seq ranges need not be anywhere near each other, so a seq range would prune
nothing) the rows come from the flush's own temp table (`fold_staged`).

Upserts leave a level table in arrival order, so `level = L` would scan every row group.
`cluster_levels` (run with retention, hourly) rewrites each level table ordered by
(level, keys, bucket); the zone maps then confine a chart query to its level's row
groups, plus the unclustered rows added since.
"""

from __future__ import annotations

import duckdb

from cockpit.store.schema import (
    LEVEL_BASE_BITS,
    LEVEL_BITS,
    LEVEL_COUNT,
    LEVEL_SERIES,
    levels_ddl,
    levels_table,
)

_NULL_KEY = {"VARCHAR": "''", "INTEGER": "-1"}


# Where a fold finds its new rows: a (host, seq) range of the table, or a staged relation.
_FROM_TABLE = (
    "r AS (SELECT unnest($hosts) AS host, unnest($los) AS lo), "
    'new AS (SELECT {{cols}} FROM "{table}" t JOIN r ON t.host = r.host '
    "WHERE t.seq >= r.lo AND t.seq >= $min_lo AND {{has_x}})"
)
_FROM_STAGED = 'new AS (SELECT {{cols}} FROM "{staged}" t WHERE {{has_x}})'


_DELTA = "cockpit_level_delta"  # temp table of the folding connection


def _fold_sql(table: str, source: str) -> tuple[str, str, str]:
    """(stage the level deltas, merge them into existing rows, insert the new rows).

    Three statements rather than one INSERT .. ON CONFLICT DO UPDATE: DuckDB plans the
    upsert as a MERGE that first groups its whole input by key again to reject duplicate
    keys, which costs more than the rollup itself (measured: 88 ms of 200 ms for the
    28 k level rows of a 2048-GPU flush). The rollup's rows are unique per key by
    construction, so an UPDATE from them and an INSERT of the rest are exact; the INSERT
    is skipped when every delta row found its row (most flushes: a level-0 bucket is 64
    seconds wide). A series key whose new rows fall in one finest bucket (again most
    flushes of a fleet sampling at 1 Hz) has exactly one row per level, taken as is
    instead of through a second aggregation.
    """
    spec = LEVEL_SERIES[table]
    keys: dict[str, str] = spec["keys"]  # type: ignore[assignment]
    columns: tuple[str, ...] = spec["columns"]  # type: ignore[assignment]
    x = spec["x"]
    lv = levels_table(table)
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
    plain_cols = ", ".join(f'"{c}_{part}"' for c in columns for part in ("lo", "hi", "last", "lx"))
    updates = ", ".join(
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
    match = " AND ".join(f'd."{k}" = e."{k}"' for k in [*keys, "level", "bucket"])
    delta = f"""
CREATE OR REPLACE TEMP TABLE {_DELTA} AS
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
    update = f'UPDATE "{lv}" AS d SET {updates} FROM {_DELTA} AS e WHERE {match}'
    insert = (f'INSERT INTO "{lv}" SELECT e.* FROM {_DELTA} AS e '
              f'WHERE NOT EXISTS (SELECT 1 FROM "{lv}" AS d WHERE {match})')
    return delta, update, insert


def _fold(cur: duckdb.DuckDBPyConnection, sqls: tuple[str, str, str],
          params: dict[str, object] | None = None) -> None:
    delta, update, insert = sqls
    created = cur.execute(delta, params or {}).fetchone()
    if not created or not created[0]:
        return
    updated = cur.execute(update).fetchone()
    if not updated or int(updated[0]) < int(created[0]):
        cur.execute(insert)


_UPDATES = {table: _fold_sql(table, _FROM_TABLE.format(table=table)) for table in LEVEL_SERIES}


def update_levels(
    cur: duckdb.DuckDBPyConnection, table: str, first_new_seq: dict[str, int]
) -> None:
    """Fold the rows of `table` with seq >= first_new_seq[host] into its level table."""
    if table not in _UPDATES or not first_new_seq:
        return
    hosts = list(first_new_seq)
    los = [first_new_seq[h] for h in hosts]
    _fold(cur, _UPDATES[table], {"hosts": hosts, "los": los, "min_lo": min(los)})


def cluster_levels(cur: duckdb.DuckDBPyConnection) -> None:
    """Rewrite every level table ordered by (level, keys, bucket), inside `cur`'s transaction."""
    for table, spec in LEVEL_SERIES.items():
        name = levels_table(table)
        order = ", ".join(["level", *(f'"{k}"' for k in spec["keys"]), "bucket"])  # type: ignore[union-attr]
        cur.execute(f'DROP TABLE IF EXISTS "{name}__clustered"')
        cur.execute(levels_ddl(table, f"{name}__clustered"))
        cur.execute(f'INSERT INTO "{name}__clustered" SELECT * FROM "{name}" ORDER BY {order}')
        cur.execute(f'DROP TABLE "{name}"')
        cur.execute(f'ALTER TABLE "{name}__clustered" RENAME TO "{name}"')


def fold_staged(cur: duckdb.DuckDBPyConnection, table: str, staged: str) -> None:
    """Fold every row of `staged` (a relation with `table`'s columns) into its level table."""
    if table not in LEVEL_SERIES:
        return
    _fold(cur, _fold_sql(table, _FROM_STAGED.format(staged=staged)))
