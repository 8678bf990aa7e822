"""The report's text rows that say more than a number."""

from __future__ import annotations

from typing import Any

from cockpit.read.report_text import _efficiency


def _slowest_row(**f: Any) -> str:
    base = {"gpu_busy": None, "samples_per_s": None, "tokens_per_s": None,
            "data_wait_pct": None, "comm_pct": None, "mfu": None, "step_time_median": 1.0,
            "step_time_spread": None, "slowest_ranks": [], "note": None}
    rows = dict(_efficiency({**base, **f}, "running"))
    return str(rows["slowest ranks"])


def test_the_slowest_ranks_row_tells_even_ranks_from_unknown_ones() -> None:
    assert _slowest_row(step_time_spread=0.01) == "none: the ranks are even"
    assert _slowest_row() == "n/a"  # one rank, or no per-rank times
    named = _slowest_row(step_time_spread=0.4, slowest_ranks=[
        {"rank": 3, "host": "b", "step_time": 0.95}])
    assert named == "rank 3 (b) 0.95s (own time: step time less comm wait)"
