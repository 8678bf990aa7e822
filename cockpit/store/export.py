"""A recording's tables and series as Parquet or CSV files, through DuckDB's own `COPY`.

For archives next to the recording (`cockpit archive --parquet`) and for tools that read
Parquet (pandas, Spark, a notebook): one file per record table, named for it, with the
columns the store keeps (the schema in `cockpit.store.schema`); or one series of a table,
`TABLE.COLUMN` (`train.loss`, `gpu.temp`), as `TABLE.COLUMN.FMT`: the column's stored
values, with the keys that place each one (host, seq, ts and those of job, rank, step,
gpu the table has), its rows where the value is null left out. The recording is opened
read-only; the files are written to a temporary name and renamed, so a file that exists
is whole.
"""

from __future__ import annotations

import os
from pathlib import Path

from cockpit.store.database import Store
from cockpit.store.schema import RECORD_COLUMNS

FORMATS = {"parquet": "(FORMAT PARQUET, COMPRESSION ZSTD)", "csv": "(FORMAT CSV, HEADER)"}


def export_tables(recording: Path, out_dir: Path, fmt: str = "parquet",
                  tables: list[str] | None = None) -> list[Path]:
    """Write each record table of `recording` (or those named: `TABLE` or a series
    `TABLE.COLUMN`) to `out_dir/NAME.FMT`; returns the files written, empty ones
    included (a reader sees the columns)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {sorted(FORMATS)}, not {fmt!r}")
    names = list(RECORD_COLUMNS) if tables is None else tables
    unknown = sorted({n.partition(".")[0] for n in names} - set(RECORD_COLUMNS))
    if unknown:
        raise ValueError(f"no such table: {', '.join(unknown)} "
                         f"(tables: {', '.join(RECORD_COLUMNS)})")
    selects = {name: _select(name) for name in names}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with Store(recording, read_only=True) as store, store.cursor() as cur:
        present = {t for (t,) in cur.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        for name in names:
            if name.partition(".")[0] not in present:
                continue
            dest = out_dir / f"{name}.{fmt}"
            tmp = out_dir / f".{name}.{fmt}.tmp"
            quoted = str(tmp).replace("'", "''")
            cur.execute(f"COPY ({selects[name]}) TO '{quoted}' {FORMATS[fmt]}")
            os.replace(tmp, dest)
            written.append(dest)
    return written


SERIES_KEYS = ("job", "rank", "step", "gpu")  # placed after host, seq, ts where a table has them


def _select(name: str) -> str:
    """The query of a table (`train`) or of one of its series (`train.loss`), checked
    against the schema: nothing the user typed reaches the SQL unchecked."""
    table, _, column = name.partition(".")
    if not column:
        return f'SELECT * FROM "{table}" ORDER BY host, seq'
    columns = RECORD_COLUMNS[table]
    if column not in columns or column in SERIES_KEYS:
        series = [c for c in columns if c not in SERIES_KEYS]
        raise ValueError(f"{table} has no series {column!r} (its series: {', '.join(series)})")
    keys = ", ".join(["host", "seq", "ts", *(f'"{k}"' for k in SERIES_KEYS if k in columns)])
    return (f'SELECT {keys}, "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL '
            "ORDER BY host, seq")
