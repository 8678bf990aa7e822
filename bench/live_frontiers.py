"""A live refresh's first read on a long recording: where every table ends.

Each refresh of a live cockpit starts by asking every record table for its row count and
newest ts (`StoreReader.frontiers`). Over a whole table, `max(ts)` reads every row: a
cost that grows for as long as the job runs. The reader asks only the rows from the
previous frontier on, where DuckDB's zone maps skip the rest.

Builds a store whose gpu table holds `--rows` samples (1,024 GPUs, one a second: 20 M is
about five and a half hours), and a small one (`--small`), inside DuckDB (range(), so
building is fast). Then, `--runs` times, one more second of the fleet's samples is
ingested through `Store.ingest_many` (not timed) and the live reader's frontiers are
timed; the baseline is the whole-table probe of the same store at the same moment (what
every refresh ran before). Goals: on the large store, the live probe <= 0.2x the whole-
table probe, and <= 2x the live probe of the small store (it scales with the rows added,
not the rows stored). The last line printed is JSON.

    .venv/bin/python bench/live_frontiers.py [--rows 20000000] [--small 100000] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.wire.protocol import encode
from bench.result import report
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.store.queries_base import RECORD_TABLES, WINDOWS
from cockpit.store.queries_frontiers import probe_frontiers

HOSTS = 128
GPUS = 8
TS0 = 1_700_000_000.0
GOAL_RATIO = 0.2
GOAL_SCALING = 2.0


def build(path: Path, rows: int) -> float:
    """A store of `rows` GPU samples, HOSTS x GPUS a second; the seconds it covers."""
    per_second = HOSTS * GPUS
    with Store(path) as store:
        with store.write_cursor() as cur:
            cur.execute(
                f"""
                INSERT INTO gpu (host, seq, ts, gpu, util, temp)
                SELECT 'node-' || ((i // {GPUS}) % {HOSTS}), i + 1,
                    {TS0} + (i // {per_second}), i % {GPUS}, 90.0, 60.0
                FROM range($rows) r(i)
                """,
                {"rows": rows},
            )
        store.checkpoint()
    return rows / per_second


def one_second(seconds: float, seq: int) -> list[tuple[str, bytes]]:
    """Every host's GPU samples of the second after `seconds`, as their agents send them."""
    ts = TS0 + seconds
    return [(f"node-{h}", b"".join(
        encode("gpu", seq + g, {"gpu": g, "util": 90.0, "temp": 60.0, "sim": True}, ts=ts)
        for g in range(GPUS))) for h in range(HOSTS)]  # fmt: skip


def time_store(path: Path, rows: int, runs: int) -> tuple[list[float], list[float]]:
    """Milliseconds per live frontier read, and per whole-table probe, after each second."""
    seconds = build(path, rows)
    live, whole = [], []
    with Store(path) as store:
        reader = StoreReader(store)
        reader.frontiers(until_ts=None)  # the first refresh reads whole
        seq = rows + 1
        for _ in range(runs):
            store.ingest_many(one_second(seconds, seq))
            seconds += 1
            seq += GPUS
            start = time.perf_counter()
            found = reader.frontiers(until_ts=None)
            live.append((time.perf_counter() - start) * 1000)
            with store.cursor() as cur:
                start = time.perf_counter()
                plain = probe_frontiers(cur, RECORD_TABLES, None, WINDOWS, {})
                whole.append((time.perf_counter() - start) * 1000)
            if (dict(found.ts), dict(found.rows)) != (dict(plain.ts), dict(plain.rows)):
                raise RuntimeError(f"the live frontiers differ: {found} != {plain}")
    return live, whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    started = time.perf_counter()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-frontiers-") as tmp:
        for name, rows in (("large", args.rows), ("small", args.small)):
            live, whole = time_store(Path(tmp) / f"{name}.duckdb", rows, args.runs)
            figures[name] = (statistics.median(live), statistics.median(whole))
            print(f"{name:5} {rows:>12,} GPU rows: live probe median {figures[name][0]:7.2f} ms,"
                  f" whole-table probe median {figures[name][1]:7.2f} ms", flush=True)
    (value, baseline), (small, small_whole) = figures["large"], figures["small"]
    passed = value <= GOAL_RATIO * baseline and value <= GOAL_SCALING * small
    return report(
        "live_frontiers", round(value, 3), "ms (median frontier read per refresh)",
        round(baseline, 3),
        goal=f"ratio <= {GOAL_RATIO:g}, and value <= {GOAL_SCALING:g}x the small store's",
        passed=passed, metric="frontiers_median_ms",
        baseline_name="the whole-table probe of the same store at the same moment",
        rows=args.rows, small_rows=args.small, small_live_ms=round(small, 3),
        small_whole_ms=round(small_whole, 3), runs=args.runs,
        bench_wall_s=round(time.perf_counter() - started, 1))


if __name__ == "__main__":
    sys.exit(main())
