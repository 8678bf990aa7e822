"""Per-rank summaries of recent steps, shared by the efficiency and stall rules.

In synchronous data-parallel training every rank's *wall* step time is the same: the
slow rank makes the others wait inside the collective. What tells ranks apart is their
own work — step time minus time spent waiting in communication — so stragglers are
ranked by that (it equals the step time when the trainer reports no phase breakdown).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from cockpit.analysis.stats import finite, median


class StepSample(NamedTuple):
    """One rank's one step, as the store returns recent steps (a refresh builds a few
    thousand: a tuple is made several times faster than a frozen dataclass)."""

    rank: int
    host: str
    step: int
    step_time: float | None
    data_time: float | None = None
    compute_time: float | None = None
    comm_time: float | None = None
    samples: int | None = None
    tokens: int | None = None
    ts: float | None = None


@dataclass(frozen=True)
class RankSummary:
    rank: int
    host: str
    step_time: float  # median wall step time
    own_time: float  # median step time minus communication wait
    data_share: float | None  # data_time / step_time over the window, 0..1
    comm_share: float | None
    last_step: int
    steps: int


def phase_totals(steps: Sequence[StepSample], attr: str) -> tuple[float, float] | None:
    """(time in phase `attr`, step time) summed over the steps of the ranks that time
    that phase, or None when none does.

    A trainer's `Reporter` leaves a phase out of a step that did not enter it: a rank
    that times communication only on the steps that broadcast its controls (every tenth
    step) spent no time in it on the others. Dividing by the step time of the timed steps
    alone made that a share of a few steps, several times the job's.
    """
    timed = {s.rank for s in steps if getattr(s, attr) is not None}
    part = whole = 0.0
    for s in steps:
        t = s.step_time
        if s.rank in timed and t is not None and t > 0:
            part += getattr(s, attr) or 0.0
            whole += t
    return (part, whole) if timed and whole > 0 else None


def _share(rows: Sequence[StepSample], attr: str) -> float | None:
    totals = phase_totals(rows, attr)
    return None if totals is None else totals[0] / totals[1]


def summarize_ranks(steps: Sequence[StepSample]) -> list[RankSummary]:
    by_rank: dict[int, list[StepSample]] = {}
    for s in steps:
        by_rank.setdefault(s.rank, []).append(s)
    out = []
    for rank in sorted(by_rank):
        rows = by_rank[rank]
        walls = [s.step_time for s in rows]
        times = finite(walls)
        if not times:
            continue
        comms = [s.comm_time for s in rows]
        own = finite([w - c if c is not None and w is not None else w
                      for w, c in zip(walls, comms, strict=True)])
        out.append(
            RankSummary(
                rank=rank,
                host=rows[-1].host,
                step_time=median(times),
                own_time=median(own) if own else median(times),
                data_share=_share(rows, "data_time"),
                comm_share=_share(rows, "comm_time"),
                last_step=max(s.step for s in rows),
                steps=len(rows),
            )
        )
    return out


def step_wall_times(steps: Sequence[StepSample]) -> list[float]:
    """One wall time per step (median over the ranks that reported it), in step order."""
    by_step: dict[int, list[float]] = {}
    for s in steps:
        t = s.step_time
        if t is not None and math.isfinite(t):
            by_step.setdefault(s.step, []).append(t)
    return [median(by_step[k]) for k in sorted(by_step)]
