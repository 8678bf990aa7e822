"""Per-rank summaries of recent steps, shared by the efficiency and stall rules.

In synchronous data-parallel training every rank's *wall* step time is the same: the
slow rank makes the others wait inside the collective. What tells ranks apart is their
own work — step time minus time spent waiting in communication — so stragglers are
ranked by that (it equals the step time when the trainer reports no phase breakdown).

A record may cover several optimizer steps (`StepSample.steps`: a trainer that logs every
N steps): its times are those steps' sums, so every time per step here is the record's
divided by its steps, and a speed is the steps done over the time they took.
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
    steps: int = 1  # optimizer steps the record covers (`queries_train.STEPS_SQL`)


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
        walls = [_per_step(s.step_time, s) for s in rows]
        times = finite(walls)
        if not times:
            continue
        comms = [_per_step(s.comm_time, s) for s in rows]
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


def _per_step(seconds: float | None, s: StepSample) -> float | None:
    return None if seconds is None else seconds / max(s.steps, 1)


def step_walls(steps: Sequence[StepSample]) -> tuple[list[float], list[int]]:
    """Per recorded step, in step order: the wall time of one optimizer step (the
    record's over the steps it covers, median over the ranks that reported it), and how
    many optimizer steps that record covers (what a mean over them weighs it by)."""
    by_step: dict[int, list[float]] = {}
    covers: dict[int, int] = {}
    for s in steps:
        t = s.step_time
        if t is not None and math.isfinite(t):
            n = max(s.steps, 1)
            by_step.setdefault(s.step, []).append(t / n)
            covers[s.step] = max(covers.get(s.step, 1), n)
    order = sorted(by_step)
    return [median(by_step[k]) for k in order], [covers[k] for k in order]


def step_wall_times(steps: Sequence[StepSample]) -> list[float]:
    """One wall time per optimizer step for each recorded step (`step_walls`)."""
    return step_walls(steps)[0]


def steps_per_second(times: Sequence[float], counts: Sequence[int] | None = None
                     ) -> float | None:  # fmt: skip
    """The steps done per second of wall time: the mean step's rate, over per-step
    `times` each standing for `counts` steps (one each when not given)."""
    weights = counts if counts is not None else [1] * len(times)
    pairs = [(t, n) for t, n in zip(times, weights, strict=True) if t > 0 and n > 0]
    spent = sum(t * n for t, n in pairs)
    return sum(n for _, n in pairs) / spent if spent > 0 else None
