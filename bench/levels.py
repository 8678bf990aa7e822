"""Chart-level upkeep per flush against the size of the level table already stored.

A fleet adds millions of level rows a day; a flush must cost the same on day one and on
day thirty. Two stores are prepared in the same run: each gets a history of finest-level
buckets for every GPU of a 256-host x 8-GPU fleet (`--small` and `--large` level rows in
all, older than anything flushed), then one warm-up flush, then `--flushes` timed flushes
of one second of gpu samples for every GPU (`Store.ingest_many`, one chunk per host, as
the writer sends them), the two stores in turn, crossing a bucket boundary. Both stores
fold on every flush (`fold_interval=0`), so each timed flush stores its rows and folds
them into the chart levels, the upkeep a live store does once per fold interval; with
the default interval (15 s) these flushes would only park their rows. Reported: median
flush time on the large store (value) against the small one (baseline). Goal: ratio
<= 1.25.

A flush that crosses a bucket boundary closes the open bucket of every series; it must
not cost much more than any other. A third store, also folding on every flush, takes two
seconds of samples per flush (as a writer's flush does under load) and reports the
boundary flush against the median of the others (`boundary_ratio`). Goal: <= 3. The
last line printed is JSON.

    .venv/bin/python bench/levels.py [--small 100000] [--large 5000000] [--flushes 9]
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
from cockpit.store.schema import levels_table

HOSTS = 256
GPUS = 8
TS0 = 1_800_000_000.0
GOAL = 1.25
BOUNDARY_GOAL = 3.0
FIRST_SECOND = 60  # the timed flushes cross a finest-bucket boundary (64 s) at TS0 + 64


def _stream_header() -> bytes:
    return encode("stream", 0, {"protocol": 1, "agent_version": "bench", "journal_id": "J",
                                "from": 0, "first": 1, "head": 0}, ts=TS0)


def fleet_chunks(flush: int, second: int) -> list[tuple[str, bytes]]:
    """One second of gpu samples for every GPU, one chunk per host, the `flush`-th one."""
    chunks = []
    for h in range(HOSTS):
        lines = [] if flush else [_stream_header()]
        for g in range(GPUS):
            lines.append(encode("gpu", flush * GPUS + g + 1, {
                "gpu": g, "uuid": f"GPU-{h}-{g}", "util": float((second * 7 + g) % 100),
                "mem_util": 30.0, "mem_used": 1 << 33, "temp": 60.0 + g, "power": 300.0,
                "sm_clock": 1980, "pcie_tx": 1e9, "pcie_rx": 2e9}, ts=TS0 + second))
        chunks.append((f"h{h:03d}", b"".join(lines)))
    return chunks


def fill_history(store: Store, rows: int) -> None:
    """`rows` finest-level rows spread over every GPU, in buckets before TS0."""
    per_key = max(1, rows // (HOSTS * GPUS))
    first_bucket = int(TS0) // 64 - per_key - 1
    with store.write_cursor() as cur:
        cur.execute(
            f'INSERT INTO "{levels_table("gpu")}" '
            "(host, gpu, level, bucket, n, x_lo, x_hi, ts_hi, util_lo, util_hi, util_last, "
            "util_lx) "
            "SELECT printf('h%03d', k // $gpus), k % $gpus, 0, $b0 + b, 64, "
            "($b0 + b) * 64.0, ($b0 + b) * 64.0 + 63, ($b0 + b) * 64.0 + 63, 0, 100, 50, "
            "($b0 + b) * 64.0 + 63 "
            "FROM range($keys) AS k(k), range($per_key) AS r(b)",
            {"gpus": GPUS, "b0": first_bucket, "keys": HOSTS * GPUS, "per_key": per_key},
        )
    store.checkpoint()


def _prepare(store: Store, rows: int) -> int:
    """Fill `store` with history and one warm-up flush; the level rows it then holds."""
    fill_history(store, rows)
    store.ingest_many(fleet_chunks(0, FIRST_SECOND - 1))
    with store.cursor() as cur:
        return int(cur.execute(
            f'SELECT count(*) FROM "{levels_table("gpu")}"').fetchall()[0][0])


def _flush(store: Store, flush: int) -> float:
    chunks = fleet_chunks(flush, FIRST_SECOND + flush - 1)
    start = time.perf_counter()
    store.ingest_many(chunks)
    return time.perf_counter() - start


def boundary_ratio(tmp: Path, rows: int, flushes: int) -> tuple[float, float]:
    """(boundary flush s, median of the other flushes s), folding on every flush.

    Each flush holds two seconds of samples, as a writer's flush does under load, so the
    one that crosses the boundary adds rows to both the closing and the next bucket of
    every series.
    """
    times = {}
    with Store(tmp / "every.duckdb", fold_interval=0.0) as store:
        _prepare(store, rows)
        for flush in range(1, flushes + 1):
            second = FIRST_SECOND + 2 * flush - 1
            chunks = fleet_chunks(2 * flush - 1, second) + fleet_chunks(2 * flush, second + 1)
            start = time.perf_counter()
            store.ingest_many(chunks)
            times[second] = time.perf_counter() - start
    crossing = next(second for second in times if (second + 1) % 64 == 0)
    others = [t for second, t in times.items() if second != crossing]
    return times[crossing], statistics.median(others)


def measure(tmp: Path, small_rows: int, large_rows: int,
            flushes: int) -> tuple[float, float, int, int]:
    """(median s per flush small, large, level rows small, large).

    The two stores flush in turn, so that drift in the machine's load touches both, and
    fold on every flush, so that every timed flush does the level upkeep.
    """
    with Store(tmp / "small.duckdb", fold_interval=0.0) as small, \
            Store(tmp / "large.duckdb", fold_interval=0.0) as large:
        small_stored = _prepare(small, small_rows)
        large_stored = _prepare(large, large_rows)
        small_times, large_times = [], []
        for flush in range(1, flushes + 1):
            small_times.append(_flush(small, flush))
            large_times.append(_flush(large, flush))
    return (statistics.median(small_times), statistics.median(large_times), small_stored,
            large_stored)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=5_000_000)
    parser.add_argument("--flushes", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, large, small_rows, large_rows = measure(Path(tmp), args.small, args.large,
                                                       args.flushes)
        crossing, usual = boundary_ratio(Path(tmp), args.small, args.flushes)
    ratio = large / small
    crossing_ratio = crossing / usual
    print(f"flush and fold of {HOSTS * GPUS} gpu rows: {small * 1e3:.1f} ms with {small_rows} "
          f"level rows stored, {large * 1e3:.1f} ms with {large_rows} (ratio {ratio:.2f})")
    print(f"folding every flush: {crossing * 1e3:.1f} ms for the flush that closes every "
          f"bucket, {usual * 1e3:.1f} ms median of the others (ratio {crossing_ratio:.2f})")
    return report(
        "levels", round(large, 4), "s (median flush, folding)", round(small, 4),
        goal=f"ratio <= {GOAL:g} and boundary_ratio <= {BOUNDARY_GOAL:g}",
        passed=ratio <= GOAL and crossing_ratio <= BOUNDARY_GOAL,
        metric="flush_s_median_large_store", boundary_ratio=round(crossing_ratio, 2),
        boundary_flush_s=round(crossing, 4), usual_flush_s=round(usual, 4),
        baseline_name="same flush at the small store", small_level_rows=small_rows,
        large_level_rows=large_rows, rows_per_flush=HOSTS * GPUS, flushes=args.flushes,
        fold_interval_s=0.0,
    )


if __name__ == "__main__":
    sys.exit(main())
