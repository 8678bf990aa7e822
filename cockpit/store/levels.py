"""Keep the level tables (schema.LEVEL_SERIES) current as records are inserted.

A chart of a month-long run must not scan the month: the downsampling query reads, per
series key, about `buckets` rows from the one level whose bucket width fits the range
(`cockpit.store.downsample`). Each level row holds count, x range, newest ts and, per
value column, min, max, the last non-null value and the x of that value, which is enough
to merge partial buckets exactly: a flush aggregates its new rows once at the finest
level, derives every coarser level from that, and upserts.

The cost per flush is proportional to the rows it adds, not to the table size: new rows
are found by their (host, seq) range, which the zone maps of the insertion-ordered `seq`
column prune.

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


def _update_sql(table: str) -> str:
    spec = LEVEL_SERIES[table]
    keys: dict[str, str] = spec["keys"]  # type: ignore[assignment]
    columns: tuple[str, ...] = spec["columns"]  # type: ignore[assignment]
    x = spec["x"]
    key_names = ", ".join(f'"{k}"' for k in keys)
    new_keys = ", ".join(f'coalesce(t."{k}", {_NULL_KEY[typ]}) AS "{k}"' for k, typ in keys.items())
    new_cols = ", ".join(f't."{c}"::DOUBLE AS "{c}"' for c in columns)
    base_cols = ", ".join(
        f'min("{c}") AS "{c}_lo", max("{c}") AS "{c}_hi", arg_max("{c}", x) AS "{c}_last", '
        f'max(x) FILTER (WHERE "{c}" IS NOT NULL) AS "{c}_lx"'
        for c in columns
    )
    level_cols = ", ".join(
        f'min("{c}_lo"), max("{c}_hi"), arg_max("{c}_last", "{c}_lx"), max("{c}_lx")'
        for c in columns
    )
    updates = ", ".join(
        [
            "n = d.n + excluded.n",
            "x_lo = least(d.x_lo, excluded.x_lo)",
            "x_hi = greatest(d.x_hi, excluded.x_hi)",
            "ts_hi = greatest(d.ts_hi, excluded.ts_hi)",
        ]
        + [
            f'"{c}_lo" = least(d."{c}_lo", excluded."{c}_lo"), '
            f'"{c}_hi" = greatest(d."{c}_hi", excluded."{c}_hi"), '
            f'"{c}_last" = CASE WHEN excluded."{c}_lx" IS NOT NULL AND '
            f'(d."{c}_lx" IS NULL OR excluded."{c}_lx" >= d."{c}_lx") '
            f'THEN excluded."{c}_last" ELSE d."{c}_last" END, '
            f'"{c}_lx" = greatest(d."{c}_lx", excluded."{c}_lx")'
            for c in columns
        ]
    )
    return f"""
INSERT INTO "{levels_table(table)}" AS d
WITH r AS (SELECT unnest($hosts) AS host, unnest($los) AS lo),
new AS (
    SELECT {new_keys}, t."{x}"::DOUBLE AS x, t.ts, {new_cols}
    FROM "{table}" t JOIN r ON t.host = r.host
    WHERE t.seq >= r.lo AND t.seq >= $min_lo AND t."{x}" IS NOT NULL
),
base AS (
    SELECT {key_names}, floor(x / {1 << LEVEL_BASE_BITS})::BIGINT AS b0, count(*) AS n,
        min(x) AS x_lo, max(x) AS x_hi, max(ts) AS ts_hi, {base_cols}
    FROM new GROUP BY ALL
)
SELECT {key_names}, l AS level, b0 >> ({LEVEL_BITS} * l) AS bucket, sum(n)::BIGINT,
    min(x_lo), max(x_hi), max(ts_hi), {level_cols}
FROM base CROSS JOIN range({LEVEL_COUNT}) lv(l)
GROUP BY ALL
ON CONFLICT ({key_names}, level, bucket) DO UPDATE SET {updates}
"""


_UPDATES = {table: _update_sql(table) for table in LEVEL_SERIES}


def update_levels(
    cur: duckdb.DuckDBPyConnection, table: str, first_new_seq: dict[str, int]
) -> None:
    """Fold the rows of `table` with seq >= first_new_seq[host] into its level table."""
    if table not in _UPDATES or not first_new_seq:
        return
    hosts = list(first_new_seq)
    los = [first_new_seq[h] for h in hosts]
    cur.execute(_UPDATES[table], {"hosts": hosts, "los": los, "min_lo": min(los)})


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
