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

from cockpit.analysis.stats import median


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


class JobTotals(NamedTuple):
    """The job-wide sums a window's ranks give (`rank_window`), for its shares and rates.

    `data`/`comm`: (time in the phase, step time) summed over the steps of the ranks
    that time that phase, or None when none does. A trainer's `Reporter` leaves a phase
    out of a step that did not enter it: a rank that times communication only on the
    steps that broadcast its controls (every tenth step) spent no time in it on the
    others, and dividing by the step time of the timed steps alone made that a share of
    a few steps, several times the job's.

    `samples_per_s`/`tokens_per_s`: the sum over ranks of the units each processed over
    the time it took (each rank's own rate, so a window that cuts a step in half on some
    ranks does not bias it), or None when no rank reports the unit.
    """

    data: tuple[float, float] | None = None
    comm: tuple[float, float] | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None


def rank_window(steps: Sequence[StepSample]) -> tuple[list[RankSummary], JobTotals]:
    """Every rank's summary and the job's totals, in one pass over each rank's steps.

    A refresh summarises a few thousand steps (the window of every rank): one pass per
    figure was most of the efficiency figures' time at 16 ranks.
    """
    by_rank: dict[int, list[StepSample]] = {}
    for s in steps:
        by_rank.setdefault(s.rank, []).append(s)
    out = []
    data_part = data_whole = comm_part = comm_whole = 0.0
    data_any = comm_any = False
    rates: dict[str, float] = {}
    for rank in sorted(by_rank):
        rows = by_rank[rank]
        walls: list[float] = []
        own: list[float] = []
        data_timed = comm_timed = False
        data = comm = whole = 0.0  # the phases' and the steps' time, steps with a time
        done = {"samples": [0.0, 0.0], "tokens": [0.0, 0.0]}  # units, their time
        known = {"samples": False, "tokens": False}
        for s in rows:
            t, d, c = s.step_time, s.data_time, s.comm_time
            data_timed = data_timed or d is not None
            comm_timed = comm_timed or c is not None
            if t is not None:
                n = s.steps if s.steps > 1 else 1
                w = t / n
                if math.isfinite(w):
                    walls.append(w)
                    o = w - c / n if c is not None else w
                    if math.isfinite(o):
                        own.append(o)
                if t > 0:
                    data += d or 0.0
                    comm += c or 0.0
                    whole += t
                    for unit, count in (("samples", s.samples), ("tokens", s.tokens)):
                        if count is not None:
                            acc = done[unit]
                            acc[0] += count
                            acc[1] += t
                            known[unit] = True
        for unit, (total, spent) in done.items():
            if known[unit] and spent > 0:
                rates[unit] = rates.get(unit, 0.0) + total / spent
        if data_timed and whole > 0:
            data_any = True
            data_part += data
            data_whole += whole
        if comm_timed and whole > 0:
            comm_any = True
            comm_part += comm
            comm_whole += whole
        if not walls:
            continue
        out.append(
            RankSummary(
                rank=rank,
                host=rows[-1].host,
                step_time=median(walls),
                own_time=median(own) if own else median(walls),
                data_share=data / whole if data_timed and whole > 0 else None,
                comm_share=comm / whole if comm_timed and whole > 0 else None,
                last_step=max(s.step for s in rows),
                steps=len(rows),
            )
        )
    return out, JobTotals(
        data=(data_part, data_whole) if data_any else None,
        comm=(comm_part, comm_whole) if comm_any else None,
        samples_per_s=rates.get("samples"), tokens_per_s=rates.get("tokens"))


def summarize_ranks(steps: Sequence[StepSample]) -> list[RankSummary]:
    """Every rank's summary (`rank_window` without the job's totals)."""
    return rank_window(steps)[0]


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
