"""A record that covers N optimizer steps counts as N steps.

A trainer that logs every N steps (the Transformers adapter, `logging_steps=N`) writes
one record per N steps whose step_time, phase times and samples are those N steps'
sums, and says N in `extra.steps`. Speed, step time, ETA and stalls are per optimizer
step, not per record: these feed the rules the records of such a trainer (0.85 s steps,
logged every 5) and the records of a trainer that logs every step, and expect the
same figures from both.
"""

from __future__ import annotations

import pytest

from cockpit.analysis.efficiency import compute_efficiency
from cockpit.analysis.eta import estimate_eta, stretch_means
from cockpit.analysis.ranks import StepSample, step_walls, steps_per_second
from cockpit.analysis.stalls import detect_stall
from cockpit.store.queries_train import MAX_STEPS_PER_RECORD, record_steps

STEP_S = 0.85
EVERY = 5
BATCH = 8  # samples per rank per optimizer step


def logged_every(n: int, last: int, ranks: int = 2, slow_from: int | None = None
                 ) -> list[StepSample]:  # fmt: skip
    """Each rank's records up to step `last`, one per `n` optimizer steps; steps after
    `slow_from` take three times as long."""
    out = []
    for step in range(n, last + 1, n):
        per_step = STEP_S * (3 if slow_from is not None and step > slow_from else 1)
        for rank in range(ranks):
            out.append(StepSample(rank, f"h{rank}", step, per_step * n, 0.1 * per_step * n,
                                  0.8 * per_step * n, 0.05 * per_step * n, BATCH * n, None,
                                  1000.0 + step * STEP_S, n))
    return out


def test_speed_and_step_time_are_per_optimizer_step_not_per_record() -> None:
    every_step = compute_efficiency(logged_every(1, 200))
    every_5 = compute_efficiency(logged_every(EVERY, 200))
    for figures in (every_step, every_5):
        assert figures.steps_per_s == pytest.approx(1 / STEP_S)
        assert figures.step_time_median == pytest.approx(STEP_S)
        # Samples over the time they took, summed over the two ranks.
        assert figures.samples_per_s == pytest.approx(2 * BATCH / STEP_S)
        assert figures.data_wait_pct == pytest.approx(10.0)
        assert figures.comm_pct == pytest.approx(5.0)
        assert [r.own_time for r in figures.ranks] == pytest.approx([0.95 * STEP_S] * 2)


def test_the_eta_counts_the_steps_each_record_covers() -> None:
    walls, counts = step_walls(logged_every(EVERY, 200))
    assert walls == pytest.approx([STEP_S] * 40) and counts == [EVERY] * 40
    eta = estimate_eta(step=200, total_steps=1000, recent_step_times=walls,
                       step_counts=counts)
    assert eta.steps_per_second == pytest.approx(1 / STEP_S)
    assert eta.seconds == pytest.approx(800 * STEP_S)
    assert eta.low == pytest.approx(800 * STEP_S) and eta.high == pytest.approx(800 * STEP_S)


def test_a_short_record_weighs_as_the_few_steps_it_covers() -> None:
    """A record after a resume (the steps since the checkpoint, not since the last
    log) covers fewer steps: the mean is steps done over the time they took, not a mean
    of records."""
    times, counts = [1.0, 3.0], [9, 1]  # seconds per step; steps covered
    assert steps_per_second(times, counts) == pytest.approx(10 / 12)
    eta = estimate_eta(step=0, total_steps=10, recent_step_times=times, step_counts=counts)
    assert eta.seconds == pytest.approx(12.0)
    assert stretch_means([1.0, 1.0, 1.0, 3.0, 3.0, 3.0], [5, 5, 5, 1, 1, 1]) == \
        pytest.approx([1.0, 3.0])


def test_a_slowdown_is_seen_per_step_and_silence_per_record() -> None:
    walls, _ = step_walls(logged_every(EVERY, 200, slow_from=175))
    verdict = detect_stall(since_last_step=0.0, recent_wall_times=walls, ranks=[],
                           steps_per_record=EVERY)
    assert verdict.stalled and verdict.kind == "slowdown"
    assert "3.0x slower than usual (2.55s vs 0.85s)" in (verdict.detail or "")
    # A trainer heard from once per 500 steps of 0.85 s is silent for 7 minutes between
    # records: that is its rhythm, not a stall; ten of its records' time is.
    quiet = 500 * STEP_S
    assert not detect_stall(since_last_step=quiet, recent_wall_times=[STEP_S] * 20,
                            ranks=[], steps_per_record=500).stalled
    stalled = detect_stall(since_last_step=11 * quiet, recent_wall_times=[STEP_S] * 20,
                           ranks=[], steps_per_record=500)
    assert stalled.stalled and stalled.kind == "no progress"
    assert "usual step 0.85s, one record per 500 steps" in (stalled.detail or "")
    # The same silence from a trainer that logs every step is a stall.
    assert detect_stall(since_last_step=quiet, recent_wall_times=[STEP_S] * 20,
                        ranks=[]).stalled


@pytest.mark.parametrize(("extra", "steps"), [
    ({"steps": 5}, 5), ({"steps": 5.0}, 5), ({"steps": 2.5}, 1), ({"steps": "5"}, 1),
    ({"steps": True}, 1), ({"steps": 0}, 1), ({"steps": -5}, 1),
    ({"steps": MAX_STEPS_PER_RECORD}, MAX_STEPS_PER_RECORD),
    ({"steps": MAX_STEPS_PER_RECORD + 1}, 1), ({"steps": float("nan")}, 1), ({}, 1),
    (None, 1), ("{\"steps\": 5}", 1),
])
def test_what_a_record_says_it_covers_is_checked(extra: object, steps: int) -> None:
    """`extra.steps` comes from the trainer: a whole number in range, else one step."""
    assert record_steps(extra) == steps
