"""Chart query cost against run length: the downsampled train-loss series.

Builds two recordings inside DuckDB (range(), so building is fast): one with >= 50 M
train rows (64 ranks on 8 hosts) and one with 1 M, fills their level tables the way
ingest does (`cockpit.store.levels.update_levels`) and clusters them as maintenance
does (`cluster_levels`), then times the query every chart
refresh runs (`cockpit.store.downsample.downsample`, whole run, 160 buckets, min / max /
last per bucket) ~50 times on each and reports the p95.

Goals: p95 <= 20 ms on the 50 M store, and <= 2x the 1 M store's p95. The last line
printed is JSON.

    .venv/bin/python bench/query.py [--rows 50000000] [--small 1000000] [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result import report
from cockpit.store import Store
from cockpit.store.downsample import downsample
from cockpit.store.levels import cluster_levels, update_levels

RANKS = 64
HOSTS = 8
TS0 = 1_700_000_000.0


def build(path: Path, rows: int) -> float:
    """A store with `rows` train rows for job 'bench'; returns seconds spent building."""
    start = time.perf_counter()
    hosts = [f"h{i}" for i in range(HOSTS)]
    with Store(path) as store:
        with store.write_cursor() as cur:
            cur.execute(
                f"""
                INSERT INTO train (host, seq, ts, job, rank, step, loss, lr, step_time)
                SELECT 'h' || ((i % {RANKS}) // {RANKS // HOSTS}), i + 1,
                    {TS0} + (i // {RANKS}) * 0.5, 'bench', i % {RANKS}, i // {RANKS},
                    2.0 + sin((i // {RANKS}) / 1000.0) + random() * 0.1, 3e-4,
                    0.5 + random() * 0.01
                FROM range($rows) r(i)
                """,
                {"rows": rows},
            )
            update_levels(cur, "train", dict.fromkeys(hosts, 0))
            cluster_levels(cur)  # what hourly maintenance does to a long recording
        store.checkpoint()
    return time.perf_counter() - start


def time_queries(path: Path, runs: int, **kw) -> tuple[float, float, int]:
    """(p95 ms, median ms, points) of `runs` downsample calls on a read-only open."""
    times = []
    points = 0
    with Store(path, read_only=True) as store:
        for _ in range(runs + 3):
            start = time.perf_counter()
            with store.cursor() as cur:
                xs, _, _, _ = downsample(cur, "train", "loss", x="step", **kw)
            times.append((time.perf_counter() - start) * 1000)
            points = len(xs)
    times = times[3:]  # warm-up
    p95 = statistics.quantiles(times, n=20)[-1]
    return p95, statistics.median(times), points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--buckets", type=int, default=160)
    args = parser.parse_args()
    query = {"buckets": args.buckets, "where": {"job": "bench"}}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as tmp:
        big, small = Path(tmp) / "big.duckdb", Path(tmp) / "small.duckdb"
        built_small = build(small, args.small)
        built_big = build(big, args.rows)
        print(f"built {args.small} rows in {built_small:.1f} s, {args.rows} rows in "
              f"{built_big:.1f} s ({big.stat().st_size / 2**20:.0f} MiB)")
        small_p95, small_med, small_pts = time_queries(small, args.runs, **query)
        big_p95, big_med, big_pts = time_queries(big, args.runs, **query)
        rank_p95, _, _ = time_queries(big, args.runs, buckets=args.buckets,
                                      where={"job": "bench", "rank": 0})
        steps = args.rows // RANKS
        replay_p95, _, _ = time_queries(big, args.runs, until_ts=TS0 + steps * 0.5 * 0.6,
                                        **query)
    print(f"1 M rows:  p95 {small_p95:.2f} ms (median {small_med:.2f}), {small_pts} points")
    print(f"{args.rows / 1e6:.0f} M rows: p95 {big_p95:.2f} ms (median {big_med:.2f}), "
          f"{big_pts} points; one rank p95 {rank_p95:.2f} ms; replay cursor p95 "
          f"{replay_p95:.2f} ms")
    ratio = big_p95 / small_p95
    passed = big_p95 <= 20.0 and ratio <= 2.0
    return report(
        "query", round(big_p95, 3), "ms (p95)", round(small_p95, 3),
        goal="value <= 20 and ratio <= 2", passed=passed, metric="p95_ms",
        baseline_name=f"same query at {args.small} rows", rows=args.rows,
        small_rows=args.small, buckets=args.buckets, points=big_pts,
        one_rank_p95_ms=round(rank_p95, 3), replay_p95_ms=round(replay_p95, 3),
    )


if __name__ == "__main__":
    sys.exit(main())
