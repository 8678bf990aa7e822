"""Bound the size of a long recording without losing what the instruments need.

Raw `gpu` and `host_sample` rows (one per GPU / host per second) dominate a recording.
Rows older than the raw window (7 days by default) are folded into 1-minute
min/mean/max rows (`gpu_rollup`, `host_sample_rollup`) and deleted; charts of old
periods keep working from the level tables, which are aggregates already. `train`,
`eval`, `event`, `alert`, `run` and `hello` are kept whole; `log` is capped by row count,
oldest first. A live session applies it hourly on the writer thread (`cockpit watch
--keep-raw`), and then re-clusters the level tables on a thread of their own
(`Store.recluster_levels`).
The cut-off is aligned to a minute so that a minute is folded once; a late row for an
already folded minute is merged into its row (means weighted by count).

Estimating storage for a job (method, run `python -m cockpit.store.retention`):
`measure_bytes_per_row()` ingests realistic synthetic lines of one type at a time into
a scratch store (level tables included), checkpoints it and divides the file growth by
the row count; the 1-minute roll-up row is measured the same way. A month on 128 GPUs
(16 hosts of 8) at 1 Hz under this policy holds 7 days of raw gpu rows (128 * 86400 * 7)
and host rows (16 * 86400 * 7), 23 days of 1-minute roll-ups ((128 + 16) * 1440 * 23)
and the train rows (ranks * steps per second * 30 days); `estimate_month()` multiplies
those counts by the measured bytes per row. (Measured here: about 78 B per gpu row,
36 B per train row and 18-19 GiB for 128 GPUs with 128 ranks at 1 step/s; rerun it,
the figures depend on the data's compressibility.)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from cockpit.ingest.synthetic import synthetic_lines
from cockpit.store.database import Store

DAY = 86400.0


@dataclass(frozen=True)
class RetentionPolicy:
    raw_window: float = 7 * DAY  # seconds of raw gpu / host samples kept
    log_max_rows: int = 1_000_000


@dataclass(frozen=True)
class RetentionResult:
    gpu_rolled: int
    host_rolled: int
    logs_deleted: int


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


def _fold(cur, raw: str, rollup: str, agg: str, merge: str, keys: str, cut: float) -> int:
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


def apply_retention(
    store: Store, policy: RetentionPolicy | None = None, now: float | None = None
) -> RetentionResult:
    """Fold and delete raw samples older than the window; cap logs. One transaction."""
    policy = policy or RetentionPolicy()
    now = time.time() if now is None else now
    cut = (now - policy.raw_window) // 60 * 60
    with store.write_cursor() as cur:
        gpu = _fold(cur, "gpu", "gpu_rollup", _GPU_AGG, _GPU_MERGE, "host, gpu, minute", cut)
        host = _fold(cur, "host_sample", "host_sample_rollup", _HOST_AGG, _HOST_MERGE,
                     "host, minute", cut)
        logs = cur.execute(
            "DELETE FROM log WHERE (host, seq) IN (SELECT host, seq FROM log "
            "ORDER BY ts DESC, seq DESC OFFSET $cap)",
            {"cap": policy.log_max_rows},
        ).fetchone()
    return RetentionResult(gpu, host, int(logs[0]) if logs else 0)


def _grown(path: str, fill: Callable[[Store], None]) -> int:
    with Store(path) as store:
        store.checkpoint()
        empty = os.path.getsize(path)
        fill(store)
        store.checkpoint()
    return os.path.getsize(path) - empty


def measure_bytes_per_row(rows: int = 200_000) -> dict[str, float]:
    """Bytes per stored row, measured: each sampled table (its level table included) in
    its own scratch store, and the 1-minute gpu roll-up row."""
    lines = synthetic_lines(rows).splitlines(keepends=True)
    header = lines[0]
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for wire_type, table in (("gpu", "gpu"), ("host", "host_sample"), ("train", "train")):
            prefix = b'{"t":"%s",' % wire_type.encode()
            chunk = header + b"".join(line for line in lines if line.startswith(prefix))
            count = chunk.count(b"\n") - 1
            path = os.path.join(tmp, f"{table}.duckdb")
            grown = _grown(path, lambda store, c=chunk: store.ingest("estimate", c))
            sizes[table] = grown / count
        with Store(os.path.join(tmp, "gpu.duckdb")) as store:
            apply_retention(store, now=2e9 + 30 * DAY)
            with store.cursor() as cur:
                rolled = cur.sql("SELECT * FROM gpu_rollup").to_arrow_table()

        def fill_rollup(store: Store) -> None:
            with store.write_cursor() as cur:
                cur.register("_rolled", rolled)
                cur.execute("INSERT INTO gpu_rollup SELECT * FROM _rolled")

        sizes["gpu_rollup"] = _grown(os.path.join(tmp, "rollup.duckdb"), fill_rollup) / max(
            rolled.num_rows, 1)
    return sizes


def estimate_month(gpus: int = 128, gpus_per_host: int = 8, steps_per_s: float = 1.0,
                   ranks: int | None = None) -> dict[str, object]:
    """Bytes for a 30-day job under the default policy, from measured bytes per row."""
    per_row = measure_bytes_per_row()
    hosts = max(1, gpus // gpus_per_host)
    ranks = gpus if ranks is None else ranks
    raw_s = RetentionPolicy().raw_window
    month = 30 * DAY
    total = (
        gpus * raw_s * per_row["gpu"]
        + hosts * raw_s * per_row["host_sample"]
        + ranks * steps_per_s * month * per_row["train"]
        + (gpus + hosts) * ((month - raw_s) / 60) * per_row["gpu_rollup"]
    )
    return {"bytes_per_row": per_row, "gpus": gpus, "hosts": hosts, "ranks": ranks,
            "steps_per_s": steps_per_s, "total_gib": total / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure and estimate recording size.")
    parser.add_argument("--gpus", type=int, default=128)
    parser.add_argument("--steps-per-s", type=float, default=1.0)
    args = parser.parse_args()
    print(json.dumps(estimate_month(args.gpus, steps_per_s=args.steps_per_s), indent=2))


if __name__ == "__main__":
    main()
