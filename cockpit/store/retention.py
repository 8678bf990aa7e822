"""Bound the size of a long recording without losing what the instruments need.

Raw `gpu` and `host_sample` rows (one per GPU / host per second) and the `train` rows of
every rank (one per rank per step) dominate a recording. Past the raw window (3 days by
default: a job that dies on a Friday night is still there in full detail on Monday):

- `gpu` and `host_sample` rows are folded into 1-minute min/mean/max rows (`gpu_rollup`,
  `host_sample_rollup`) and deleted;
- `train` rows of ranks other than 0 are deleted, except those with a non-finite loss:
  every rank's series stays in the chart levels (min, max and last per 64-step bucket and
  coarser), and rank 0's rows stay whole (the step-by-step record of the job). A replay
  of that period says so: rank 0 stands for every rank (totals and throughput times the
  world size, no spread; `cockpit.read.source`);
- `log` is capped by row count, oldest first; `eval`, `event`, `alert`, `run` and
  `hello` are kept whole, and so are the level tables (charts of old periods read them).

The cut-off is aligned to a minute so that a minute is folded once; a late row for an
already folded minute is merged into its row (means weighted by count). A live session
applies the policy hourly on the writer thread (`cockpit watch --keep-raw`), and then
re-clusters the level tables on a thread of their own (`Store.recluster_levels`). The
backlog is worked through an hour of raw rows per transaction, each followed by a
checkpoint: the writer's DuckDB memory is capped, and DuckDB holds what a transaction
deletes until the next checkpoint (docs/architecture.md).

Estimating storage for a job (run `python -m cockpit.store.retention`):
`measure_bytes_per_row()` ingests realistic synthetic lines (readings shaped as NVML and
psutil report them, `cockpit.ingest.synthetic`) into a scratch store, applies the policy
to get roll-up rows, then copies each table into a file of its own and divides the file
size by the rows of the table it stands for. `estimate_month()` multiplies those by the
rows a 30-day job keeps: 128 GPUs on 16 hosts sampled at 1 Hz and 128 ranks at 1 step/s
by default. Measured here: about 4 GiB for that month (raw samples and other ranks' steps
for 3 days, 1-minute roll-ups and chart levels for 30, rank 0's steps whole); rerun it,
the figures depend on the data's compressibility.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass

import duckdb

from cockpit.ingest.synthetic import synthetic_lines
from cockpit.store.database import Store

DAY = 86400.0


@dataclass(frozen=True)
class RetentionPolicy:
    raw_window: float = 3 * DAY  # seconds of raw samples (and other ranks' steps) kept
    log_max_rows: int = 1_000_000


@dataclass(frozen=True)
class RetentionResult:
    gpu_rolled: int
    host_rolled: int
    logs_deleted: int
    train_deleted: int = 0  # steps of ranks other than 0, past the window
    done: bool = True  # False: the time budget ran out with rows past the window left


_GPU_AGG = """
    SELECT host, coalesce(gpu, -1) AS gpu, floor(ts / 60) * 60 AS minute, count(*) AS n,
        min(util), avg(util), max(util), min(temp), avg(temp), max(temp),
        min(power), avg(power), max(power), max(mem_used), max(ecc_agg_unc),
        bit_or(throttle)
    FROM gpu WHERE ts < $cut GROUP BY ALL
"""
_GPU_MERGE = """
    SELECT host, gpu, minute, sum(n)::BIGINT,
        min(util_min), sum(util_mean * n) / sum(n), max(util_max),
        min(temp_min), sum(temp_mean * n) / sum(n), max(temp_max),
        min(power_min), sum(power_mean * n) / sum(n), max(power_max),
        max(mem_used_max), max(ecc_agg_unc_max), bit_or(throttle_or)
    FROM _new GROUP BY ALL
"""
_HOST_AGG = """
    SELECT host, floor(ts / 60) * 60 AS minute, count(*) AS n,
        min(cpu), avg(cpu), max(cpu), max(mem_used), max(disk_used), avg(net_rx), avg(net_tx)
    FROM host_sample WHERE ts < $cut GROUP BY ALL
"""
_HOST_MERGE = """
    SELECT host, minute, sum(n)::BIGINT, min(cpu_min), sum(cpu_mean * n) / sum(n),
        max(cpu_max), max(mem_used_max), max(disk_used_max),
        sum(net_rx_mean * n) / sum(n), sum(net_tx_mean * n) / sum(n)
    FROM _new GROUP BY ALL
"""


# Rank 0's steps (and a record without a rank) stay whole, and so does any step whose loss
# was NaN/Inf: `nonfinite_steps` lists them for the whole run.
_TRAIN_TRIMMED = "rank IS NOT NULL AND rank <> 0 AND nonfinite IS NULL"
_TRAIN_TRIM = f"DELETE FROM train WHERE ts < $cut AND {_TRAIN_TRIMMED}"


def _fold(cur: duckdb.DuckDBPyConnection, raw: str, rollup: str, agg: str, merge: str,
          keys: str, cut: float) -> int:
    cur.execute(f"CREATE OR REPLACE TEMP TABLE _new AS SELECT * FROM {rollup} LIMIT 0")
    cur.execute(f"INSERT INTO _new {agg}", {"cut": cut})
    added = cur.execute("SELECT coalesce(sum(n), 0) FROM _new").fetchone()
    if not added or not added[0]:
        cur.execute("DROP TABLE _new")
        return 0
    # Minutes folded earlier (late rows) are merged, not duplicated.
    cur.execute(f"INSERT INTO _new SELECT * FROM {rollup} WHERE ({keys}) IN "
                f"(SELECT ({keys}) FROM _new)")
    cur.execute(f"DELETE FROM {rollup} WHERE ({keys}) IN (SELECT ({keys}) FROM _new)")
    cur.execute(f"INSERT INTO {rollup} {merge}")
    cur.execute(f"DELETE FROM {raw} WHERE ts < $cut", {"cut": cut})
    cur.execute("DROP TABLE _new")
    return int(added[0])


# Seconds of raw rows one transaction folds and deletes. DuckDB holds what a transaction
# deletes in memory until the next checkpoint (about 10 B a row), and the writer's memory
# is capped (`writer_memory_limit`): the first pass over a month-old recording (hundreds
# of millions of rows past the window) would not fit in one. An hour of 1,024 GPUs and
# as many ranks is about 7 M rows.
SLICE_S = 3600.0


def _oldest(cur: duckdb.DuckDBPyConnection, cut: float) -> float | None:
    """The time of the oldest row the policy still has to fold or delete before `cut`."""
    row = cur.execute(
        "SELECT min(ts) FROM (SELECT min(ts) AS ts FROM gpu WHERE ts < $cut UNION ALL "
        "SELECT min(ts) FROM host_sample WHERE ts < $cut UNION ALL "
        f"SELECT min(ts) FROM train WHERE ts < $cut AND {_TRAIN_TRIMMED})",
        {"cut": cut}).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def apply_retention(
    store: Store, policy: RetentionPolicy | None = None, now: float | None = None,
    slice_s: float = SLICE_S, budget_s: float | None = None,
) -> RetentionResult:
    """Fold and delete raw samples older than the window, delete other ranks' steps
    older than it, cap logs: one transaction per `slice_s` of raw rows, oldest first,
    each followed by a checkpoint, which frees what DuckDB held of the rows it deleted.

    `budget_s`: start no slice after this many seconds (the caller holds up ingest
    meanwhile); the result then says whether rows past the window are left."""
    policy = policy or RetentionPolicy()
    now = time.time() if now is None else now
    cut = (now - policy.raw_window) // 60 * 60
    step = max(60.0, slice_s // 60 * 60)  # minute-aligned: each minute folds in one slice
    gpu = host = train_deleted = slices = 0
    started = time.monotonic()
    done = True
    while True:
        with store.cursor() as cur:
            oldest = _oldest(cur, cut)
        if oldest is None:
            break
        if slices and budget_s is not None and time.monotonic() - started >= budget_s:
            done = False  # at least one slice a call: every call makes progress
            break
        slices += 1
        # From the oldest row left, not the last slice's end: a recording may have gaps
        # of days (a job paused over a holiday) that need no transaction each.
        bound = min(cut, oldest // 60 * 60 + step)
        with store.write_cursor() as cur:
            gpu += _fold(cur, "gpu", "gpu_rollup", _GPU_AGG, _GPU_MERGE, "host, gpu, minute",
                         bound)
            host += _fold(cur, "host_sample", "host_sample_rollup", _HOST_AGG, _HOST_MERGE,
                          "host, minute", bound)
            train = cur.execute(_TRAIN_TRIM, {"cut": bound}).fetchone()
            train_deleted += int(train[0]) if train else 0
        store.checkpoint()
    with store.write_cursor() as cur:
        logs = cur.execute(
            "DELETE FROM log WHERE (host, seq) IN (SELECT host, seq FROM log "
            "ORDER BY ts DESC, seq DESC OFFSET $cap)",
            {"cap": policy.log_max_rows},
        ).fetchone()
    return RetentionResult(gpu, host, int(logs[0]) if logs else 0, train_deleted, done)


def _table_bytes(cur: duckdb.DuckDBPyConnection, tables: list[str], path: str) -> int:
    """Bytes `tables` take once copied into a DuckDB file of their own (compressed as the
    store compresses them), less what an empty file takes."""
    cur.execute(f"ATTACH '{path}' AS sized")
    cur.execute("DETACH sized")
    empty = os.path.getsize(path)
    cur.execute(f"ATTACH '{path}' AS sized")
    try:
        for table in tables:
            cur.execute(f'CREATE TABLE sized."{table}" AS SELECT * FROM main."{table}"')
    finally:
        cur.execute("DETACH sized")
    return os.path.getsize(path) - empty


def _per_row(cur: duckdb.DuckDBPyConnection, tmp: str, tables: list[str], per: str) -> float:
    """Bytes of `tables` per row of table `per`."""
    n = cur.execute(f'SELECT count(*) FROM "{per}"').fetchall()[0][0]
    return _table_bytes(cur, tables, os.path.join(tmp, f"{tables[0]}.duckdb")) / max(int(n), 1)


def measure_bytes_per_row(rows: int = 2_000_000) -> dict[str, float]:
    """Bytes per stored row, measured on `rows` realistic wire records: each raw table
    per row; each table's chart levels per row of that table; each roll-up per row."""
    header, _, body = synthetic_lines(rows, readings="nvml").partition(b"\n")
    lines = body.splitlines(keepends=True)
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            Store(os.path.join(tmp, "scratch.duckdb")) as store:
        for i in range(0, len(lines), 200_000):
            store.ingest("estimate", (header + b"\n" if i == 0 else b"")
                         + b"".join(lines[i:i + 200_000]))
        store.fold_levels()
        with store.cursor() as cur:
            for table in ("gpu", "host_sample", "train"):
                sizes[table] = _per_row(cur, tmp, [table], table)
                sizes[f"{table}_levels"] = _per_row(
                    cur, tmp, [f"{table}_levels", f"{table}_levels_open"], table)
        apply_retention(store, now=2e9 + 30 * DAY)
        with store.cursor() as cur:
            for table in ("gpu_rollup", "host_sample_rollup"):
                sizes[table] = _per_row(cur, tmp, [table], table)
    return sizes


def estimate_month(gpus: int = 128, gpus_per_host: int = 8, steps_per_s: float = 1.0,
                   ranks: int | None = None, raw_window: float | None = None,
                   rows: int = 2_000_000, per_row: dict[str, float] | None = None,
                   keep_all: bool = False) -> dict[str, object]:
    """Bytes a 30-day job keeps under the policy, from measured bytes per row
    (`per_row`, measured on `rows` records when not given). `keep_all`: what the same
    month takes with no retention at all (every row raw, no roll-ups)."""
    per_row = per_row or measure_bytes_per_row(rows)
    hosts = max(1, gpus // gpus_per_host)
    ranks = gpus if ranks is None else ranks
    month = 30 * DAY
    window = month if keep_all else (RetentionPolicy().raw_window if raw_window is None
                                     else raw_window)
    minutes = max(month - window, 0.0) / 60
    steps = steps_per_s * month
    parts = {
        "gpu raw": gpus * window * per_row["gpu"],
        "host raw": hosts * window * per_row["host_sample"],
        "train rank 0": steps * per_row["train"],
        "train other ranks": (ranks - 1) * steps_per_s * window * per_row["train"],
        "roll-ups": minutes * (gpus * per_row["gpu_rollup"]
                               + hosts * per_row["host_sample_rollup"]),
        "chart levels": month * (gpus * per_row["gpu_levels"]
                                 + hosts * per_row["host_sample_levels"])
                        + ranks * steps * per_row["train_levels"],
    }
    return {"bytes_per_row": per_row, "gpus": gpus, "hosts": hosts, "ranks": ranks,
            "steps_per_s": steps_per_s, "raw_window_days": window / DAY,
            "gib": {name: round(b / 2**30, 3) for name, b in parts.items()},
            "total_gib": sum(parts.values()) / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure and estimate recording size.")
    parser.add_argument("--gpus", type=int, default=128)
    parser.add_argument("--steps-per-s", type=float, default=1.0)
    parser.add_argument("--raw-days", type=float, default=None,
                        help="the raw window (default: the policy's)")
    args = parser.parse_args()
    window = None if args.raw_days is None else args.raw_days * DAY
    print(json.dumps(estimate_month(args.gpus, steps_per_s=args.steps_per_s,
                                    raw_window=window), indent=2))


if __name__ == "__main__":
    main()
