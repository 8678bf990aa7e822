"""Per-rank summaries of recent steps, shared by the efficiency and stall rules.

In synchronous data-parallel training every rank's *wall* step time is the same: the
slow rank makes the others wait inside the collective. What tells ranks apart is their
own work — step time minus time spent waiting in communication — so stragglers are
ranked by that (it equals the step time when the trainer reports no phase breakdown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.stats import finite, median


@dataclass(frozen=True)
class StepSample:
    """One rank's one step, as the store returns recent steps."""

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


def _share(part: list[float | None], whole: list[float | None]) -> float | None:
    pairs = [
        (p, w) for p, w in zip(part, whole, strict=True)
        if p is not None and w is not None and w > 0
    ]
    total = sum(w for _, w in pairs)
    return sum(p for p, _ in pairs) / total if pairs and total > 0 else None


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
        own = finite(
            (s.step_time - s.comm_time) if s.comm_time is not None and s.step_time is not None
            else s.step_time
            for s in rows
        )
        out.append(
            RankSummary(
                rank=rank,
                host=rows[-1].host,
                step_time=median(times),
                own_time=median(own) if own else median(times),
                data_share=_share([s.data_time for s in rows], walls),
                comm_share=_share([s.comm_time for s in rows], walls),
                last_step=max(s.step for s in rows),
                steps=len(rows),
            )
        )
    return out


def step_wall_times(steps: Sequence[StepSample]) -> list[float]:
    """One wall time per step (median over the ranks that reported it), in step order."""
    by_step: dict[int, list[float]] = {}
    for s in steps:
        if s.step_time is not None:
            by_step.setdefault(s.step, []).append(s.step_time)
    return [median(finite(by_step[k])) for k in sorted(by_step) if finite(by_step[k])]
