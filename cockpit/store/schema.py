"""DuckDB schema of a recording, version by version.

One wide typed table per wire record type (see docs/protocol.md); every table starts
with (host, seq, ts) and (host, seq) is unique across *all* record tables of a store, so
a resent range is stored once. Nested objects are kept as JSON text. Records of unknown
types, and unknown fields of known types, go to `other` as raw JSON, never dropped.
Migrations are append-only: `MIGRATIONS[n]` takes a store from version n to n+1.

Level tables (`<table>_levels`, see `LEVEL_SERIES`) hold min/max/last per power-of-four
bucket of x for the series the UI plots, kept up to date at insert time, so that a
downsampled chart reads a bounded number of rows however long the run is
(`cockpit.store.downsample`). The newest bucket of each series and level lives in
`<table>_levels_open` instead, so that a flush rewrites a table bounded by the number of
series and only appends to the large one (`cockpit.store.levels`).
A journal reset on a host shifts the seqs stored for its new journal by
`hosts.seq_offset`, which keeps (host, seq) unique; `hosts.high_water` stays in the
agent's own seq space, the value a reconnect passes to `--from`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

SCHEMA_VERSION = 3
# The oldest version a read-only open (replay, report) reads as it is: the tables added
# since are the writer's alone.
READABLE_FROM = 2

_KEY = "host VARCHAR NOT NULL, seq BIGINT NOT NULL, ts DOUBLE NOT NULL"

# Column lists per record table, in wire field order. Types are DuckDB types.
RECORD_COLUMNS: dict[str, dict[str, str]] = {
    "hello": {
        "agent_version": "VARCHAR", "protocol": "INTEGER", "hostname": "VARCHAR",
        "boot_id": "VARCHAR", "pid": "BIGINT", "python": "VARCHAR", "platform": "VARCHAR",
        "cpu_count": "INTEGER", "mem_total": "BIGINT", "gpu_source": "VARCHAR",
        "gpu_state": "VARCHAR", "driver": "VARCHAR", "gpus": "JSON", "env": "JSON",
        "psutil": "BOOLEAN", "state_dir": "VARCHAR", "run_dirs": "JSON",
        "interval": "DOUBLE",
    },
    "gpu": {
        "gpu": "INTEGER", "uuid": "VARCHAR", "sim": "BOOLEAN", "util": "DOUBLE",
        "mem_util": "DOUBLE", "mem_used": "BIGINT", "mem_total": "BIGINT", "temp": "DOUBLE",
        "power": "DOUBLE", "power_limit": "DOUBLE", "sm_clock": "INTEGER",
        "mem_clock": "INTEGER", "fan": "DOUBLE", "throttle": "BIGINT",
        "ecc_vol_corr": "BIGINT", "ecc_vol_unc": "BIGINT", "ecc_agg_corr": "BIGINT",
        "ecc_agg_unc": "BIGINT", "retired_pages": "BIGINT", "remap_pending": "BOOLEAN",
        "pcie_tx": "DOUBLE", "pcie_rx": "DOUBLE", "pcie_replay": "BIGINT",
        "nvlink_err": "BIGINT", "procs": "JSON",
    },
    "host_sample": {
        "cpu": "DOUBLE", "load1": "DOUBLE", "load5": "DOUBLE", "load15": "DOUBLE",
        "mem_used": "BIGINT", "mem_total": "BIGINT", "swap_used": "BIGINT",
        "swap_total": "BIGINT", "disk_path": "VARCHAR", "disk_used": "BIGINT",
        "disk_total": "BIGINT", "disk_read": "DOUBLE", "disk_write": "DOUBLE",
        "net_rx": "DOUBLE", "net_tx": "DOUBLE", "procs": "JSON",
    },
    "run": {
        "job": "VARCHAR", "rank": "INTEGER", "total_steps": "BIGINT",
        "total_epochs": "BIGINT", "total_samples": "BIGINT", "total_tokens": "BIGINT",
        "stages": "JSON", "config": "JSON", "seed": "BIGINT", "data_version": "VARCHAR",
        "git_commit": "VARCHAR", "flops_per_step": "DOUBLE", "peak_flops": "DOUBLE",
        "world_size": "INTEGER", "tags": "JSON", "src": "VARCHAR",
    },
    "train": {
        "job": "VARCHAR", "rank": "INTEGER", "step": "BIGINT", "epoch": "DOUBLE",
        "stage": "VARCHAR", "loss": "DOUBLE", "nonfinite": "VARCHAR", "lr": "DOUBLE",
        "samples": "BIGINT", "tokens": "BIGINT", "step_time": "DOUBLE",
        "data_time": "DOUBLE", "compute_time": "DOUBLE", "comm_time": "DOUBLE",
        "ckpt_time": "DOUBLE", "loss_scale": "DOUBLE", "grad_norm": "DOUBLE",
        "extra": "JSON", "src": "VARCHAR",
    },
    "eval": {
        "job": "VARCHAR", "rank": "INTEGER", "step": "BIGINT", "loss": "DOUBLE",
        "metrics": "JSON", "src": "VARCHAR",
    },
    "event": {
        "kind": "VARCHAR", "job": "VARCHAR", "rank": "INTEGER", "step": "BIGINT",
        "msg": "VARCHAR", "data": "JSON", "src": "VARCHAR",
    },
    "log": {
        "job": "VARCHAR", "rank": "INTEGER", "stream": "VARCHAR", "line": "VARCHAR",
        "src": "VARCHAR",
    },
    "alert": {
        "job": "VARCHAR", "rank": "INTEGER", "kind": "VARCHAR", "severity": "VARCHAR",
        "code": "VARCHAR", "where": "JSON",
        "what": "VARCHAR", "hint": "VARCHAR", "src": "VARCHAR",
    },
}

# Wire type -> table name (the wire type `host` would clash with the key column).
TABLE_FOR_TYPE: dict[str, str] = {t: t for t in RECORD_COLUMNS if t != "host_sample"}
TABLE_FOR_TYPE["host"] = "host_sample"


def record_table_ddl(table: str) -> str:
    cols = ", ".join(f'"{name}" {typ}' for name, typ in RECORD_COLUMNS[table].items())
    return f'CREATE TABLE IF NOT EXISTS "{table}" ({_KEY}, {cols})'


DDL_V1: list[str] = [
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    *(record_table_ddl(t) for t in RECORD_COLUMNS),
    # Records of unknown types, and the unknown fields of known ones (raw = whole line).
    f"CREATE TABLE IF NOT EXISTS other ({_KEY}, t VARCHAR, raw JSON)",
    # One row per host ever seen: transport state and the stream bookkeeping.
    """CREATE TABLE IF NOT EXISTS hosts (
        host VARCHAR PRIMARY KEY, address VARCHAR, state VARCHAR, detail VARCHAR,
        state_ts DOUBLE, journal_id VARCHAR, high_water BIGINT DEFAULT 0,
        malformed BIGINT DEFAULT 0, lost BIGINT DEFAULT 0, last_error VARCHAR,
        seq_offset BIGINT DEFAULT 0)""",
    # Malformed wire lines: counted per host, a bounded sample of them kept for the user.
    """CREATE TABLE IF NOT EXISTS wire_errors (
        host VARCHAR, ts DOUBLE, error VARCHAR, sample VARCHAR)""",
    # 1-minute roll-ups of samples older than the raw retention window.
    """CREATE TABLE IF NOT EXISTS gpu_rollup (
        host VARCHAR, gpu INTEGER, minute DOUBLE, n BIGINT,
        util_min DOUBLE, util_mean DOUBLE, util_max DOUBLE,
        temp_min DOUBLE, temp_mean DOUBLE, temp_max DOUBLE,
        power_min DOUBLE, power_mean DOUBLE, power_max DOUBLE,
        mem_used_max BIGINT, ecc_agg_unc_max BIGINT, throttle_or BIGINT)""",
    """CREATE TABLE IF NOT EXISTS host_sample_rollup (
        host VARCHAR, minute DOUBLE, n BIGINT,
        cpu_min DOUBLE, cpu_mean DOUBLE, cpu_max DOUBLE, mem_used_max BIGINT,
        disk_used_max BIGINT, net_rx_mean DOUBLE, net_tx_mean DOUBLE)""",
]


class LevelSeries(TypedDict):
    """A series kept in level tables: its x axis, its key columns (name -> SQL type; NULL
    keys stored as '' / -1) and its value columns."""

    x: str
    keys: dict[str, str]
    columns: tuple[str, ...]


# Level L has buckets of width 2 ** (LEVEL_BASE_BITS + LEVEL_BITS * L).
LEVEL_SERIES: dict[str, LevelSeries] = {
    "train": {
        "x": "step",
        "keys": {"job": "VARCHAR", "rank": "INTEGER"},
        "columns": ("loss", "lr", "loss_scale", "grad_norm", "step_time", "data_time",
                    "compute_time", "comm_time", "samples", "tokens", "epoch"),
    },
    "gpu": {
        "x": "ts",
        "keys": {"host": "VARCHAR", "gpu": "INTEGER"},
        "columns": ("util", "mem_util", "mem_used", "temp", "power", "sm_clock",
                    "pcie_tx", "pcie_rx"),
    },
    "host_sample": {
        "x": "ts",
        "keys": {"host": "VARCHAR"},
        "columns": ("cpu", "load1", "mem_used", "disk_used", "net_rx", "net_tx"),
    },
}
LEVEL_BASE_BITS = 6  # finest level: buckets of 64 steps / 64 seconds
LEVEL_BITS = 2  # each level is 4x coarser than the one below
LEVEL_COUNT = 14  # coarsest: 2 ** 32 steps / seconds (136 years)


def levels_table(table: str) -> str:
    return f"{table}_levels"


def levels_ddl(table: str, name: str | None = None) -> str:
    """A level table: one row per (keys, level, bucket).

    No primary key: the folds keep (keys, level, bucket) unique by construction (a bucket
    is appended once, when it closes; a late row merges into it by join), and DuckDB's
    index on it cost more than it guarded: about 10 B per level row in the file, its
    upkeep in memory, and 0.8 s more to commit the rewrite of 4 M rows that re-clustering
    does (during which flushes wait). A store written with the key loses it at its next
    re-clustering.
    """
    spec = LEVEL_SERIES[table]
    keys = spec["keys"]
    cols = [f'"{k}" {t} NOT NULL' for k, t in keys.items()]
    cols += ["level INTEGER NOT NULL", "bucket BIGINT NOT NULL", "n BIGINT",
             "x_lo DOUBLE", "x_hi DOUBLE", "ts_hi DOUBLE"]
    for c in spec["columns"]:
        cols += [f'"{c}_lo" DOUBLE', f'"{c}_hi" DOUBLE', f'"{c}_last" DOUBLE', f'"{c}_lx" DOUBLE']
    return f'CREATE TABLE IF NOT EXISTS "{name or levels_table(table)}" ({", ".join(cols)})'


def levels_open_table(table: str) -> str:
    return f"{table}_levels_open"


def levels_open_ddl(table: str) -> str:
    """The newest bucket per (keys, level), the only level rows a flush rewrites.

    Unique per (keys, level) by construction; bounded by the number of series (not the
    length of the run) and joined by hash, whole.
    """
    return levels_ddl(table, levels_open_table(table))


def pending_table(table: str) -> str:
    return f"{table}_levels_pending"


def pending_columns(table: str) -> dict[str, str]:
    """What a fold needs of a row of `table`: its series keys, x, ts and value columns."""
    spec = LEVEL_SERIES[table]
    names = [*spec["keys"], spec["x"], "ts", *spec["columns"]]
    types = {**RECORD_COLUMNS[table], "ts": "DOUBLE", "host": "VARCHAR"}
    return {name: types[name] for name in dict.fromkeys(names)}


def pending_ddl(table: str) -> str:
    """Rows stored but not yet folded into the level tables.

    A fold costs about the same whatever its size (it rewrites the open bucket of every
    series and level), so the store folds every few seconds and parks the rows of the
    flushes in between here, in each flush's own transaction. Chart queries read these
    few rows raw next to the level rows (`cockpit.store.downsample`), so a chart never
    lags the raw tables.
    """
    cols = ", ".join(f'"{name}" {typ}' for name, typ in pending_columns(table).items())
    return f'CREATE TABLE IF NOT EXISTS "{pending_table(table)}" ({cols})'


def levels_relation(table: str, columns: Sequence[str] | None = None) -> str:
    """Every folded level row of `table`: the closed buckets and the open one of each
    series (the parked rows, `pending_ddl`, are not in it: readers read those raw).

    Name the `columns` a query needs: binding a union of the full, wide rows costs more
    than a chart query's scans.
    """
    names = "*" if columns is None else ", ".join(f'"{c}"' for c in columns)
    return (f'(SELECT {names} FROM "{levels_table(table)}" UNION ALL '
            f'SELECT {names} FROM "{levels_open_table(table)}")')


def kind_is(*kinds: str) -> str:
    """An SQL test of the `event` table's `kind` column: `kind = 'a'`, `kind IN ('a', 'b')`.
    The kinds are `agent.wire.events`' constants, so a statement never retypes one (and
    a kind spelt anew there is spelt anew here)."""
    if not kinds:
        raise ValueError("an SQL test of an event's kind needs at least one kind")
    quoted = ", ".join("'" + kind.replace("'", "''") + "'" for kind in kinds)
    return f"kind = {quoted}" if len(kinds) == 1 else f"kind IN ({quoted})"


DDL_V1 += [levels_ddl(t) for t in LEVEL_SERIES]
DDL_V1 += [levels_open_ddl(t) for t in LEVEL_SERIES]

# MIGRATIONS[n] upgrades a store at version n to n + 1. Version 0 = empty file.
DDL_V2: list[str] = [pending_ddl(t) for t in LEVEL_SERIES]
# Runs filed away by a fresh launch of their job's name (`cockpit.store.earlier_runs`):
# what a host's rows of the job that arrive after the filing are stored under.
DDL_V3: list[str] = [
    "CREATE TABLE IF NOT EXISTS filed_run (job VARCHAR NOT NULL, name VARCHAR NOT NULL, "
    "start DOUBLE NOT NULL)",
]
MIGRATIONS: dict[int, list[str]] = {0: DDL_V1, 1: DDL_V2, 2: DDL_V3}
