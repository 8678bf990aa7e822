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
from operator import attrgetter, sub
from typing import Any, NamedTuple

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


class _RankSums(NamedTuple):
    """One rank's part of a window (`rank_window`)."""

    walls: list[float]  # finite wall times per optimizer step
    own: list[float]  # those less communication wait, where finite
    data_timed: bool
    comm_timed: bool
    data: float  # time in the phase over the steps with a time > 0
    comm: float
    whole: float  # those steps' time
    rates: dict[str, float]  # unit -> units over the time they took


def rank_window(steps: Sequence[StepSample]) -> tuple[list[RankSummary], JobTotals]:
    """Every rank's summary and the job's totals, in one pass over each rank's steps.

    A refresh summarises a few thousand steps (the window of every rank), so a rank
    whose records are all plain (one step each, a finite time above zero: what most
    trainers send) is summed by C-level passes (`_plain_sums`), the others step by step
    (`_rank_sums`); both give the same figures, bit for bit.
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
        sums = _plain_sums(rows)
        if sums is None:
            sums = _rank_sums(rows)
        for unit, rate in sums.rates.items():
            rates[unit] = rates.get(unit, 0.0) + rate
        whole = sums.whole
        if sums.data_timed and whole > 0:
            data_any = True
            data_part += sums.data
            data_whole += whole
        if sums.comm_timed and whole > 0:
            comm_any = True
            comm_part += sums.comm
            comm_whole += whole
        if not sums.walls:
            continue
        out.append(
            RankSummary(
                rank=rank,
                host=rows[-1].host,
                step_time=median(sums.walls),
                own_time=median(sums.own) if sums.own else median(sums.walls),
                data_share=sums.data / whole if sums.data_timed and whole > 0 else None,
                comm_share=sums.comm / whole if sums.comm_timed and whole > 0 else None,
                last_step=max(map(_STEP, rows)),
                steps=len(rows),
            )
        )
    return out, JobTotals(
        data=(data_part, data_whole) if data_any else None,
        comm=(comm_part, comm_whole) if comm_any else None,
        samples_per_s=rates.get("samples"), tokens_per_s=rates.get("tokens"))


_STEP = attrgetter("step")


def _plain_sums(rows: Sequence[StepSample]) -> _RankSums | None:
    """`_rank_sums` of a rank whose records each cover one step and have a finite step
    time above zero, by passes that run in C (a quarter of the time a step-by-step pass
    takes); None for any other rank. Each sum is `sum(values, 0.0)` over the values
    `_rank_sums` sums, in the same order, so the figures are the same to the last bit."""
    # The rows' columns, by one transposition (a NamedTuple is a tuple).
    (_, _, _, times, datas, _, comms, samples, tokens, _, covers) = zip(*rows, strict=True)
    whole = _plain_total(times, covers)
    if whole is None or min(times) <= 0:
        return None
    data, data_timed = _phase_sum(datas)
    comm, comm_timed = _phase_sum(comms)
    if not comm_timed:
        own = list(times)
    elif None in comms:
        own = [t if c is None else t - c for t, c in zip(times, comms, strict=True)]
    else:
        own = list(map(sub, times, comms))
    if not math.isfinite(sum(own, 0.0)):
        own = [o for o in own if math.isfinite(o)]
    rates: dict[str, float] = {}
    for unit, counts in (("samples", samples), ("tokens", tokens)):
        total = _sum_or_none(counts)
        if total is not None:
            rates[unit] = total / whole
        elif counts.count(None) < len(counts):
            taken = sum([t for t, n in zip(times, counts, strict=True) if n is not None], 0.0)
            rates[unit] = sum([n for n in counts if n is not None], 0.0) / taken
    return _RankSums(list(times), own, data_timed, comm_timed, data, comm, whole, rates)


def _plain_total(times: Sequence[Any], covers: Sequence[int]) -> float | None:
    """The sum of a window's step times where each record covers one step and has a
    finite time (`_plain_sums`, `step_walls`), else None."""
    try:
        if max(covers) > 1:
            return None
        total = sum(times, 0.0)
    except TypeError:  # a step without a time
        return None
    return total if math.isfinite(total) else None  # an inf or NaN time makes it so


def _sum_or_none(values: Sequence[Any]) -> float | None:
    """`sum(values, 0.0)`, or None where a value is None."""
    try:
        return sum(values, 0.0)
    except TypeError:
        return None


def _phase_sum(values: Sequence[float | None]) -> tuple[float, bool]:
    """A phase's time over steps that each have a time above zero, a missing one as
    zero (`_rank_sums`), and whether any step timed the phase."""
    total = _sum_or_none(values)
    if total is not None:
        return total, bool(values)
    return sum([v or 0.0 for v in values], 0.0), values.count(None) < len(values)


def _rank_sums(rows: Sequence[StepSample]) -> _RankSums:
    """One rank's walls, own times, phase and step time sums and unit rates, step by
    step: records covering several steps, missing, zero or non-finite times."""
    walls: list[float] = []
    own: list[float] = []
    data_timed = comm_timed = False
    datas: list[float] = []  # per step with a time > 0: time in each phase, the step's
    comms: list[float] = []
    spent: list[float] = []
    units: dict[str, tuple[list[Any], list[float]]] = {}  # unit -> counts, their times
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
                datas.append(d or 0.0)
                comms.append(c or 0.0)
                spent.append(t)
                for unit, count in (("samples", s.samples), ("tokens", s.tokens)):
                    if count is not None:
                        counts, times = units.setdefault(unit, ([], []))
                        counts.append(count)
                        times.append(t)
    rates: dict[str, float] = {}
    for unit, (counts, times) in units.items():
        taken = sum(times, 0.0)
        if taken > 0:
            rates[unit] = sum(counts, 0.0) / taken
    return _RankSums(walls, own, data_timed, comm_timed, sum(datas, 0.0), sum(comms, 0.0),
                     sum(spent, 0.0), rates)


def summarize_ranks(steps: Sequence[StepSample]) -> list[RankSummary]:
    """Every rank's summary (`rank_window` without the job's totals)."""
    return rank_window(steps)[0]


def step_walls(steps: Sequence[StepSample]) -> tuple[list[float], list[int]]:
    """Per recorded step, in step order: the wall time of one optimizer step (the
    record's over the steps it covers, median over the ranks that reported it), and how
    many optimizer steps that record covers (what a mean over them weighs it by)."""
    by_step: dict[int, list[float]] = {}
    if steps:
        # Most windows hold only records of one step each with a finite time: their
        # times are grouped as they are (a refresh's few thousand, by one transposition).
        (_, _, numbers, times, *_, covers) = zip(*steps, strict=True)
        if _plain_total(times, covers) is not None:
            for k, t in zip(numbers, times, strict=True):
                wall = float(t)  # as `t / 1` below: the same value, a float
                held = by_step.get(k)
                if held is None:
                    by_step[k] = [wall]
                else:
                    held.append(wall)
            order = sorted(by_step)
            return [median(by_step[k]) for k in order], [1] * len(order)
    covers_of: dict[int, int] = {}
    for s in steps:
        t = s.step_time
        if t is not None and math.isfinite(t):
            n = max(s.steps, 1)
            by_step.setdefault(s.step, []).append(t / n)
            covers_of[s.step] = max(covers_of.get(s.step, 1), n)
    order = sorted(by_step)
    return [median(by_step[k]) for k in order], [covers_of[k] for k in order]


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
