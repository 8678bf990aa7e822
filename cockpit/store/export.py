"""A recording's tables as Parquet or CSV files, through DuckDB's own `COPY`.

For archives next to the recording (`cockpit archive --parquet`) and for tools that read
Parquet (pandas, Spark, a notebook): one file per record table, named for it, with the
columns the store keeps (the schema in `cockpit.store.schema`). The recording is opened
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
    """Write each record table of `recording` (or those named) to `out_dir/TABLE.FMT`;
    returns the files written, empty tables included (a reader sees the columns)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {sorted(FORMATS)}, not {fmt!r}")
    names = list(RECORD_COLUMNS) if tables is None else tables
    unknown = sorted(set(names) - set(RECORD_COLUMNS))
    if unknown:
        raise ValueError(f"no such table: {', '.join(unknown)} "
                         f"(tables: {', '.join(RECORD_COLUMNS)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with Store(recording, read_only=True) as store, store.cursor() as cur:
        present = {t for (t,) in cur.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        for table in names:
            if table not in present:
                continue
            dest = out_dir / f"{table}.{fmt}"
            tmp = out_dir / f".{table}.{fmt}.tmp"
            quoted = str(tmp).replace("'", "''")
            cur.execute(f"COPY (SELECT * FROM \"{table}\" ORDER BY host, seq) "
                        f"TO '{quoted}' {FORMATS[fmt]}")
            os.replace(tmp, dest)
            written.append(dest)
    return written
