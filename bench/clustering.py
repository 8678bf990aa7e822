"""Ingest stall while the chart levels are re-clustered, against a rewrite under the lock.

A live session re-clusters its level tables hourly (`Store.recluster_levels`); for a long
run a rewrite reads millions of rows. Two stores are prepared alike: `--rows` finest-level
gpu rows of history for a 256-host x 8-GPU fleet (`bench/levels.py`'s history). On each,
a writer thread flushes one second of samples for every GPU back to back, as a busy
writer does, while the main thread rewrites the gpu level table:

  (a) baseline: `cluster_levels` inside one write transaction (what maintenance did
      before: the writer waits for the whole rewrite);
  (b) `Store.recluster_levels`: ordered copy outside the write lock, then the swap.

Reported: the longest flush while the rewrite ran, (b) as value against (a). Goal:
ratio <= 0.2. Both rewrites must leave every level row in place (checked). The last line
printed is JSON.

    .venv/bin/python bench/clustering.py [--rows 4000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.levels import FIRST_SECOND, fill_history, fleet_chunks
from bench.result import report
from cockpit.store import Store
from cockpit.store.levels import cluster_levels
from cockpit.store.schema import levels_table

GOAL = 0.2


class _Flusher:
    """Flushes one second of the fleet's samples after another until stopped."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.times: list[tuple[float, float]] = []  # (start, duration)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._flush = 1

    def _run(self) -> None:
        while not self._stop.is_set():
            chunks = fleet_chunks(self._flush, FIRST_SECOND + self._flush - 1)
            start = time.perf_counter()
            self.store.ingest_many(chunks)
            self.times.append((start, time.perf_counter() - start))
            self._flush += 1

    def __enter__(self) -> _Flusher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _level_rows(store: Store) -> int:
    with store.cursor() as cur:
        return int(cur.execute(f'SELECT count(*) FROM "{levels_table("gpu")}"').fetchall()[0][0])


def _rewrite_under_lock(store: Store) -> None:
    with store.write_cursor() as cur:
        cluster_levels(cur)


def _rewrite_beside_ingest(store: Store) -> None:
    assert "gpu_levels" in store.recluster_levels(min_new_rows=0), "gpu_levels not rewritten"


def measure(path: Path, rows: int, rewrite: Callable[[Store], None]) -> tuple[float, float, int]:
    """(longest flush s during the rewrite, rewrite s, flushes during it)."""
    with Store(path, fold_interval=0.0) as store:
        fill_history(store, rows)
        store.ingest_many(fleet_chunks(0, FIRST_SECOND - 1))
        before = _level_rows(store)
        with _Flusher(store) as flusher:
            time.sleep(2.0)  # the writer settles into its pace
            start = time.perf_counter()
            rewrite(store)
            end = time.perf_counter()
            time.sleep(1.0)
        during = [d for s, d in flusher.times if s + d >= start and s <= end]
        closed = _level_rows(store)
        store.fold_levels()
    with Store(path, read_only=True) as check, check.cursor() as cur:
        # Every flush folds (fold_interval 0): the rows the writer closed are all there.
        assert _level_rows(check) >= closed >= before, "level rows lost by the rewrite"
        keys = cur.execute("SELECT count(DISTINCT (host, gpu, level, bucket)), count(*) "
                           f'FROM "{levels_table("gpu")}"').fetchall()[0]
        assert keys[0] == keys[1], "a level bucket stored twice"
    return max(during), end - start, len(during)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as tmp:
        base_stall, base_s, base_n = measure(Path(tmp) / "a.duckdb", args.rows,
                                             _rewrite_under_lock)
        stall, rewrite_s, n = measure(Path(tmp) / "b.duckdb", args.rows, _rewrite_beside_ingest)
    print(f"{args.rows} gpu level rows; a writer flushing 2,048 GPUs' samples back to back")
    print(f"(a) rewrite under the write lock: {base_s:.2f} s, longest flush {base_stall:.2f} s "
          f"({base_n} flushes during it)")
    print(f"(b) Store.recluster_levels:       {rewrite_s:.2f} s, longest flush {stall:.2f} s "
          f"({n} flushes during it)")
    ratio = stall / base_stall
    print(f"ratio (b)/(a): {ratio:.3f} (goal <= {GOAL})")
    return report(
        "clustering", round(stall, 3), "s", round(base_stall, 3), goal=f"ratio <= {GOAL}",
        passed=ratio <= GOAL, metric="longest_flush_during_rewrite", rows=args.rows,
        baseline_name="rewrite inside one write transaction", rewrite_s=round(rewrite_s, 2),
        baseline_rewrite_s=round(base_s, 2), flushes_during=n,
    )


if __name__ == "__main__":
    sys.exit(main())
