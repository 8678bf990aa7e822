"""The live cockpit's memory on a long recording: DuckDB's buffer pool stays capped.

DuckDB keeps what it reads in a buffer pool that may grow to 80 % of the machine's memory
and is not handed back. A cockpit open for days runs hourly maintenance that reads whole
tables, so without a cap its resident memory would grow with the recording. The store's
writer caps the pool (`cockpit.store.database.writer_memory_limit`).

Builds two recordings inside DuckDB, as bench/query.py does: a short one (--small train
rows) and a long one (--rows). Each is then opened in a fresh process, as the live
cockpit's writer opens it (`Store`), and that process runs what a live session runs on it
over the hours:
  - an ingest flush of new wire lines;
  - the hourly maintenance: `apply_retention`, whose cut falls at half the run, and
    `Store.recluster_levels`, made to rewrite every level table;
  - the chart query of every refresh.
It then reports its resident memory (VmRSS) and its peak (VmHWM). The long recording is
also run once with DuckDB's own default pool, for reference: what the cap saves.

Goal: the peak resident memory on the long recording stays within the same process's
peak on the short one plus the cap: ratio = long peak / (short peak + cap) <= 1. The
resident memory after it all is printed too. The last line printed is JSON.

    .venv/bin/python bench/memory.py [--rows 40000000] [--small 1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.query import RANKS, TS0, build
from bench.result import report
from cockpit.ingest.synthetic import synthetic_lines
from cockpit.store import Store
from cockpit.store.database import writer_memory_limit
from cockpit.store.downsample import downsample
from cockpit.store.retention import RetentionPolicy, apply_retention

STEP_S = 0.5  # seconds between steps in the recordings `build` makes


def live_hours(path: Path, rows: int, uncapped: bool) -> dict[str, float]:
    """What the live session does to the recording at `path`; its memory after it (MiB)."""
    # Uncapped: DuckDB's own default, 80 % of the machine's memory.
    default = f"{int(psutil.virtual_memory().total * 0.8) >> 20}MB" if uncapped else None
    with Store(path, memory_limit=default) as store:
        store.ingest_many([("new-host", synthetic_lines(50_000, ranks=8))])
        policy = RetentionPolicy()
        apply_retention(store, policy, now=TS0 + rows // RANKS * STEP_S / 2 + policy.raw_window)
        rewritten = store.recluster_levels(min_new_rows=0)
        for _ in range(20):
            with store.cursor() as cur:
                downsample(cur, "train", "loss", x="step", buckets=160, where={"job": "bench"})
        rss = psutil.Process().memory_info().rss
    return {"rss_mib": rss / 2**20, "peak_mib": peak_bytes() / 2**20,
            "rewritten": len(rewritten)}


def peak_bytes() -> int:
    """This process's peak resident memory. Not getrusage's ru_maxrss: Linux carries it
    over from the parent across fork and exec, so a child would report its parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def in_child(path: Path, rows: int, uncapped: bool = False) -> dict[str, float]:
    """`live_hours` in a fresh process: its memory is the recording's alone."""
    argv = [sys.executable, __file__, "--child", str(path), "--rows", str(rows)]
    out = subprocess.run([*argv, *(["--uncapped"] if uncapped else [])], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=40_000_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--uncapped", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(live_hours(args.child, args.rows, args.uncapped)))
        return 0
    cap = writer_memory_limit() / 2**20
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as tmp:
        small, big = Path(tmp) / "small.duckdb", Path(tmp) / "big.duckdb"
        start = time.perf_counter()
        build(small, args.small)
        build(big, args.rows)
        print(f"built {args.small} and {args.rows} train rows in "
              f"{time.perf_counter() - start:.0f} s ({big.stat().st_size / 2**20:.0f} MiB)")
        short = in_child(small, args.small)
        uncapped_copy = Path(tmp) / "big-uncapped.duckdb"
        uncapped_copy.write_bytes(big.read_bytes())
        long = in_child(big, args.rows)
        uncapped = in_child(uncapped_copy, args.rows, uncapped=True)
    for name, m in (("short", short), ("long", long), ("long, DuckDB's default pool",
                                                        uncapped)):
        print(f"{name:28s} resident {m['rss_mib']:6.0f} MiB, peak {m['peak_mib']:6.0f} MiB "
              f"({m['rewritten']:.0f} level tables rewritten)")
    baseline = short["peak_mib"] + cap
    ratio = long["peak_mib"] / baseline
    print(f"cap {cap:.0f} MiB; long peak / (short peak + cap) = {ratio:.2f}")
    return report(
        "memory", round(long["peak_mib"], 1), "MiB (peak resident)", round(baseline, 1),
        goal="ratio <= 1", passed=ratio <= 1.0, metric="live_peak_rss",
        baseline_name="short recording's peak resident memory + the writer's DuckDB cap",
        rows=args.rows, small_rows=args.small, cap_mib=round(cap),
        short_peak_mib=round(short["peak_mib"], 1), long_rss_after_mib=round(long["rss_mib"], 1),
        short_rss_after_mib=round(short["rss_mib"], 1),
        uncapped_rss_after_mib=round(uncapped["rss_mib"], 1),
        uncapped_peak_mib=round(uncapped["peak_mib"], 1),
    )


if __name__ == "__main__":
    sys.exit(main())
