"""`rank_window` sums every figure in one pass; these are the figures as defined, one
pass each, over windows with what real trainers send: ranks that time a phase only on
some steps, records covering several steps, missing and zero times."""

from __future__ import annotations

import math
import random

import pytest

from cockpit.analysis import ranks
from cockpit.analysis.ranks import StepSample, rank_window, step_walls
from cockpit.analysis.stats import median


def _window(seed: int) -> list[StepSample]:
    rng = random.Random(seed)
    rows = []
    for step in range(1, 40):
        for rank in range(5):
            covers = rng.choice((1, 1, 4))
            t = rng.choice((None, 0.0, math.inf, *(rng.uniform(0.1, 2.0) for _ in range(6))))
            rows.append(StepSample(
                rank=rank, host=f"h{rank // 2}", step=step, step_time=t,
                data_time=rng.uniform(0, 0.2) if rank != 3 and rng.random() < 0.7 else None,
                comm_time=rng.uniform(0, 0.3) if rank < 2 and step % 10 == 0 else None,
                samples=rng.choice((None, 32)) if rank != 4 else None,
                tokens=4096 if rank == 0 else None, steps=covers))
    return rows


def _phase(rows: list[StepSample], attr: str) -> tuple[float, float] | None:
    timed = {s.rank for s in rows if getattr(s, attr) is not None}
    part = whole = 0.0
    for s in rows:
        if s.rank in timed and s.step_time is not None and s.step_time > 0:
            part += getattr(s, attr) or 0.0
            whole += s.step_time
    return (part, whole) if timed and whole > 0 else None


def _rate(rows: list[StepSample], attr: str) -> float | None:
    per: dict[int, list[float]] = {}
    for s in rows:
        units = getattr(s, attr)
        if units is not None and s.step_time is not None and s.step_time > 0:
            acc = per.setdefault(s.rank, [0.0, 0.0])
            acc[0] += units
            acc[1] += s.step_time
    return sum(d / t for d, t in per.values()) if per else None


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_gives_each_figure_as_defined(seed: int) -> None:
    rows = _window(seed)
    ranks, totals = rank_window(rows)
    for attr, got in (("data_time", totals.data), ("comm_time", totals.comm)):
        want = _phase(rows, attr)
        assert (got is None) == (want is None)
        if want is not None and got is not None:
            assert got == pytest.approx(want)
    for attr, rate in (("samples", totals.samples_per_s), ("tokens", totals.tokens_per_s)):
        assert rate == pytest.approx(_rate(rows, attr))
    assert totals.tokens_per_s is not None and totals.samples_per_s is not None
    for summary in ranks:
        mine = [s for s in rows if s.rank == summary.rank]
        walls = [s.step_time / s.steps for s in mine
                 if s.step_time is not None and math.isfinite(s.step_time)]
        own = [s.step_time / s.steps - (s.comm_time or 0.0) / s.steps for s in mine
               if s.step_time is not None and math.isfinite(s.step_time)]
        assert summary.step_time == pytest.approx(median(walls))
        assert summary.own_time == pytest.approx(median(own))
        for share, attr in ((summary.data_share, "data_time"),
                            (summary.comm_share, "comm_time")):
            want = _phase(mine, attr)
            assert share == (None if want is None else pytest.approx(want[0] / want[1]))
        assert summary.last_step == max(s.step for s in mine)
        assert summary.steps == len(mine)
    # A rank with no finite step time has no summary, yet its phases still count.
    assert {s.rank for s in ranks} <= set(range(5))


def test_a_rank_without_step_times_is_left_out_of_the_summaries_only() -> None:
    rows = [StepSample(rank=0, host="a", step=1, step_time=1.0, data_time=0.5, samples=10),
            StepSample(rank=1, host="b", step=1, step_time=None, data_time=0.1,
                       samples=10)]
    ranks, totals = rank_window(rows)
    assert [r.rank for r in ranks] == [0]
    assert totals.data == (0.5, 1.0)  # rank 1's step has no time to share
    assert totals.samples_per_s == pytest.approx(10.0)


def _plain_window(seed: int) -> list[StepSample]:
    """What most trainers send: one record a step, each with a time above zero; the
    phases, units and communication timed on some steps or ranks only."""
    rng = random.Random(seed)
    rows = []
    for step in range(1, 60):
        for rank in range(4):
            rows.append(StepSample(
                rank=rank, host=f"h{rank}", step=step, step_time=rng.uniform(0.05, 3.0),
                data_time=(rng.choice((0.0, -0.0, rng.uniform(0, 0.4))) if rank != 1
                           else None),
                comm_time=(rng.uniform(0, 0.5) if rank == 0 or step % 7 == 0 else None),
                samples=rng.choice((None, 16)) if rank == 2 else 16,
                tokens=rng.randrange(1, 9000) if rank < 3 else None))
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_a_plain_rank_sums_to_the_last_bit_what_a_step_by_step_pass_sums(seed: int) -> None:
    rows = _plain_window(seed)
    for rank in range(4):
        mine = [s for s in rows if s.rank == rank]
        fast = ranks._plain_sums(mine)
        assert fast is not None
        assert fast == ranks._rank_sums(mine)  # every list, sum and rate equal, not close


@pytest.mark.parametrize("odd", [
    {"step_time": None}, {"step_time": 0.0}, {"step_time": -0.5}, {"step_time": math.inf},
    {"step_time": math.nan}, {"steps": 4},
])
def test_a_rank_with_any_other_record_is_summed_step_by_step(odd: dict[str, object]) -> None:
    mine = [s for s in _plain_window(1) if s.rank == 0]
    mine[7] = mine[7]._replace(**odd)
    assert ranks._plain_sums(mine) is None


@pytest.mark.parametrize("window", [_plain_window(3), _window(2)], ids=["plain", "mixed"])
def test_step_walls_are_each_steps_median_per_optimizer_step(window: list[StepSample]) -> None:
    per_step: dict[int, list[float]] = {}
    most: dict[int, int] = {}  # the most steps a timed record of the step covers
    for s in window:
        if s.step_time is not None and math.isfinite(s.step_time):
            per_step.setdefault(s.step, []).append(s.step_time / max(s.steps, 1))
            most[s.step] = max(most.get(s.step, 1), s.steps)
    walls, covers = step_walls(window)
    assert walls == [median(per_step[k]) for k in sorted(per_step)]
    assert covers == [most[k] for k in sorted(per_step)]
