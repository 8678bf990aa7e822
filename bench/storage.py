"""Storage of a month-long job on 128 GPUs under the retention policy, against keeping
every row.

Bytes per row are measured once, on 2 M realistic wire records (readings shaped as NVML
and psutil report them) ingested into a scratch store, retention applied, each table
copied into a file of its own (`cockpit.store.retention.measure_bytes_per_row`). A
30-day job is then costed twice from the same figures: 128 GPUs on 16 hosts sampled at
1 Hz and 128 ranks at 1 step/s,

  (a) baseline: every row kept raw for the month (no retention);
  (b) the default policy: raw samples and other ranks' steps for 3 days, 1-minute
      roll-ups and the chart levels for the month, rank 0's steps whole.

Goal: (b) <= 5 GiB ("a few GB"). Fewer rows overstate the small tables (level
and roll-up tables take whole storage blocks: 300 k rows give 10 GiB). The last line
printed is JSON.

    .venv/bin/python bench/storage.py [--rows 2000000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result import report
from cockpit.store.retention import estimate_month, measure_bytes_per_row

GOAL_GIB = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    per_row = measure_bytes_per_row(args.rows)
    kept = estimate_month(per_row=per_row)
    everything = estimate_month(per_row=per_row, keep_all=True)
    print("bytes per row:", ", ".join(f"{k} {v:.1f}" for k, v in per_row.items()))
    for label, est in (("(a) no retention", everything), ("(b) default policy", kept)):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in est["gib"].items())  # type: ignore[union-attr]
        print(f"{label}: {est['total_gib']:.2f} GiB ({parts})")
    value = float(kept["total_gib"])  # type: ignore[arg-type]
    return report(
        "storage", round(value, 3), "GiB (30 days, 128 GPUs, 128 ranks at 1 step/s)",
        round(float(everything["total_gib"]), 3),  # type: ignore[arg-type]
        goal=f"value <= {GOAL_GIB}", passed=value <= GOAL_GIB, metric="month_gib",
        baseline_name="the same month with every row kept", raw_window_days=kept["raw_window_days"],
        bytes_per_row={k: round(v, 2) for k, v in per_row.items()},
    )


if __name__ == "__main__":
    sys.exit(main())
