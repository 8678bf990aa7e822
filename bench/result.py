"""The one JSON line every benchmark ends with, so that results can be compared by tools.

`value` is this project's figure, `baseline` the comparison's figure in the same unit and
measured in the same run, and `ratio` is always value / baseline -- computed here, once,
so that no benchmark can invert it or round it away.

A benchmark's exit status says the same as its `pass` (`report`): 0 when its goal was
met, `GOAL_MISSED` when it measured and missed it. Any other non-zero status means it
could not measure (1: it crashed; 2: `bench/gpu_check.py` found no CUDA device and
skipped), so `make bench` can tell a missed goal from a crash.
"""

from __future__ import annotations

import json
from typing import Any

GOAL_MISSED = 3


def _significant(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def result_line(bench: str, value: float | None, unit: str, baseline: float | None, *,
                goal: str, passed: bool, **extra: Any) -> str:  # fmt: skip
    """`{"bench", "value", "unit", "baseline", "ratio", "goal", "pass", ...extra}`, one line.

    The ratio is None when either figure is missing or the baseline is zero (a comparison
    that could not be made is reported as such, not as a number).
    """
    ratio = None
    if value is not None and baseline:
        ratio = _significant(value / baseline)
    clash = {"bench", "value", "unit", "baseline", "ratio", "goal", "pass"} & set(extra)
    if clash:
        raise ValueError(f"extra keys would overwrite the fixed ones: {sorted(clash)}")
    return json.dumps({"bench": bench, "value": value, "unit": unit, "baseline": baseline,
                       "ratio": ratio, "goal": goal, "pass": passed, **extra})  # fmt: skip


def report(bench: str, value: float | None, unit: str, baseline: float | None, *, goal: str,
           passed: bool, **extra: Any) -> int:  # fmt: skip
    """Print the JSON line (`result_line`, the same arguments) and return the benchmark's
    exit status: 0 when `passed`, else `GOAL_MISSED`."""
    print(result_line(bench, value, unit, baseline, goal=goal, passed=passed, **extra),
          flush=True)
    return 0 if passed else GOAL_MISSED
