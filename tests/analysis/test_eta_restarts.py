"""The ETA band with restarts and world-size changes, on hand-computed timelines."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cockpit.analysis.eta import (
    Eta,
    RestartHistory,
    restart_aware,
    restart_costs,
    restarting_for,
    with_restarts,
    world_size_factor,
)
from cockpit.snapshot import Interruption, Progress

# A job that ran 1000 s (its processes up) and was interrupted twice:
#   the first outage lasted 30 s to its first step and recomputed 10 steps,
#   the second lasted 50 s and recomputed 10 steps; a step takes 1 s.
# Costs: 30 + 10 * 1 = 40 s and 50 + 10 * 1 = 60 s; mean 50 s, dearest 60 s, cheapest 40 s.
# Rate: 2 / 1000 s = 0.002 per second of running.
TWO = RestartHistory(count=2, run_seconds=1000.0,
                     costs=restart_costs([(30.0, 10), (50.0, 10)], step_seconds=1.0))
# The compute time left at the recent speed: 500 s, band 400..600 s.
COMPUTE = Eta(500.0, 400.0, 600.0, 1.0)


def test_restart_costs_add_the_recomputed_steps_and_skip_open_outages() -> None:
    assert TWO.costs == (40.0, 60.0)
    assert restart_costs([(30.0, 10), (None, 4)], step_seconds=None) == (30.0,)


def test_two_interruptions_widen_the_band() -> None:
    eta = with_restarts(COMPUTE, TWO)
    # centre: 500 + 0.002 * 500 * 50 = 550
    assert eta.seconds == pytest.approx(550.0)
    # low: 0.002 * 400 = 0.8 restarts expected, one standard deviation (0.894) below
    # that is none: 400
    assert eta.low == pytest.approx(400.0)
    # high: 0.002 * 600 = 1.2, plus sqrt(1.2) = 2.2954 restarts at the dearest 60 s
    assert eta.high == pytest.approx(600.0 + (1.2 + math.sqrt(1.2)) * 60.0)
    assert eta.steps_per_second == 1.0


def test_during_a_restart_the_rest_of_it_is_added() -> None:
    eta = with_restarts(COMPUTE, TWO, restarting_for=20.0)
    # 20 s into the restart: mean 50 - 20 = 30 s more, cheapest 40 - 20, dearest 60 - 20
    assert eta.seconds == pytest.approx(550.0 + 30.0)
    assert eta.low == pytest.approx(400.0 + 20.0)
    assert eta.high == pytest.approx(600.0 + (1.2 + math.sqrt(1.2)) * 60.0 + 40.0)
    # A restart already longer than the dearest one adds nothing more.
    late = with_restarts(COMPUTE, TWO, restarting_for=90.0)
    assert late == with_restarts(COMPUTE, TWO)


def test_no_interruption_leaves_the_compute_band() -> None:
    assert with_restarts(COMPUTE, RestartHistory(0, 1000.0)) == COMPUTE
    assert with_restarts(Eta(None, None, None, 2.0), TWO) == Eta(None, None, None, 2.0)


def test_a_world_size_change_scales_each_ranks_share() -> None:
    # From 4 ranks to 2 with the global batch of 64 kept: each rank's share doubles.
    assert world_size_factor(4, 2, measured_batch=64, batch=64) == 2.0
    # A per-rank batch kept (64 over 4 ranks, 32 over 2): a step takes as long.
    assert world_size_factor(4, 2, measured_batch=64, batch=32) == 1.0
    # From 2 ranks to 4, global batch 64 kept: half as long.
    assert world_size_factor(2, 4, measured_batch=64, batch=64) == 0.5
    # Which batch the trainer keeps is not guessed.
    assert world_size_factor(4, 2, measured_batch=64, batch=None) == 1.0
    assert world_size_factor(None, 2, measured_batch=64, batch=64) == 1.0
    eta = with_restarts(COMPUTE, TWO, work_factor=world_size_factor(4, 2, 64, 64))
    # 1000 s of compute left: 1000 + 0.002 * 1000 * 50 = 1100
    assert eta.seconds == pytest.approx(1100.0)
    assert eta.low == pytest.approx(800.0 + (1.6 - math.sqrt(1.6)) * 50.0)
    assert eta.steps_per_second == pytest.approx(0.5)


def _outage(detected_at: float, recovered_in: float | None, steps_lost: int | None,
            latency: float | None = None) -> Interruption:
    return Interruption(cause="nccl", detected_at=detected_at, recovered_in=recovered_in,
                        steps_lost=steps_lost, detection_latency=latency)


def test_restart_aware_progress_keeps_the_band_while_restarting() -> None:
    outages = [_outage(100.0, 30.0, 10), _outage(600.0, 50.0, 10),
               _outage(1190.0, None, None, latency=5.0)]
    # The third outage began at 1185 (detected 5 s after the failure): 20 s at now=1205.
    assert restarting_for(outages, now=1205.0) == pytest.approx(20.0)
    progress = Progress(step=100, total_steps=600, eta_seconds=500.0, eta_low=400.0,
                        eta_high=600.0, steps_per_second=1.0, state="starting")
    shown = restart_aware(progress, outages, run_seconds=1500.0, now=1205.0)
    # 3 interruptions over 1500 s: the same rate, 0.002; costs 40 and 60 s.
    assert shown.eta_seconds == pytest.approx(550.0 + 30.0)
    assert shown.eta_low == pytest.approx(420.0)
    running = restart_aware(dataclasses.replace(progress, state="running"), outages,
                            run_seconds=1500.0, now=1205.0)
    assert running.eta_seconds == pytest.approx(550.0)  # running: no restart under way


def test_a_paused_or_ended_job_keeps_its_reason() -> None:
    paused = Progress(step=100, eta_note="paused", state="paused", steps_per_second=1.0)
    assert restart_aware(paused, [_outage(1.0, 3.0, 1)], run_seconds=10.0, now=20.0) is paused
