from __future__ import annotations

import math

import pytest

from cockpit.analysis.eta import estimate_eta, progress_fraction, stretch_means
from cockpit.analysis.smoothing import ema


def test_ema_is_bias_corrected_so_it_starts_on_the_data() -> None:
    out = ema([10.0, 10.0, 10.0], weight=0.9)
    assert out == pytest.approx([10.0, 10.0, 10.0])


def test_ema_matches_tensorboard_recurrence() -> None:
    values = [1.0, 3.0, 2.0]
    w = 0.6
    acc, expected = 0.0, []
    for n, v in enumerate(values, 1):
        acc = acc * w + (1 - w) * v
        expected.append(acc / (1 - w**n))
    assert ema(values, w) == pytest.approx(expected)
    assert expected[1] != pytest.approx(values[1])  # it really smooths


def test_ema_passes_missing_and_nonfinite_through_without_poisoning() -> None:
    out = ema([1.0, None, math.nan, 1.0], weight=0.5)
    assert out[0] == pytest.approx(1.0)
    assert out[1] is None
    assert math.isnan(out[2])
    assert out[3] == pytest.approx(1.0)


def test_ema_rejects_bad_weight() -> None:
    with pytest.raises(ValueError, match="weight"):
        ema([1.0], weight=1.0)


def test_progress_fraction_prefers_steps_then_samples() -> None:
    assert progress_fraction(step=50, total_steps=200) == pytest.approx(0.25)
    assert progress_fraction(step=50, total_steps=None, samples=30, total_samples=60) == 0.5
    assert progress_fraction(step=None, total_steps=None) is None
    assert progress_fraction(step=300, total_steps=200) == 1.0


def test_eta_band_comes_from_step_time_spread() -> None:
    times = [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]
    eta = estimate_eta(step=100, total_steps=200, recent_step_times=times)
    assert eta.seconds == pytest.approx(105.0)  # 100 steps at their mean, 1.05 s
    assert eta.low is not None and eta.high is not None
    assert eta.low < eta.seconds < eta.high
    assert eta.steps_per_second == pytest.approx(1 / 1.05)


def test_eta_counts_the_slow_steps_that_recur() -> None:
    """A checkpoint every tenth step takes its time every tenth step: the median would
    leave it out and promise the end early, and disagree with the throughput."""
    times = [1.0] * 9 + [5.0]
    eta = estimate_eta(step=0, total_steps=100, recent_step_times=times)
    assert eta.seconds == pytest.approx(140.0)
    assert eta.steps_per_second == pytest.approx(len(times) / sum(times))
    # The band is of stretches' speeds: the estimate sits inside it, not on its top.
    assert eta.low is not None and eta.high is not None
    assert eta.low < eta.seconds < eta.high


def test_eta_band_follows_a_drifting_speed_not_single_steps() -> None:
    """Forty steps at 1 s then forty at 2 s (a GPU began to throttle): the band spans
    both speeds; a steady job whose steps jitter around one speed gets a narrow band."""
    drifting = estimate_eta(step=0, total_steps=100, recent_step_times=[1.0] * 40 + [2.0] * 40)
    assert drifting.low == pytest.approx(100.0) and drifting.high == pytest.approx(200.0)
    jitter = estimate_eta(step=0, total_steps=100, recent_step_times=[0.9, 1.1] * 40)
    assert jitter.high - jitter.low < 1.0  # every stretch's mean is 1 s
    assert stretch_means([1.0] * 7) == [1.0, 1.0] and stretch_means([1.0, 2.0]) == []


def test_eta_of_steady_job_has_narrow_band_and_unknown_total_gives_speed_only() -> None:
    steady = estimate_eta(step=0, total_steps=10, recent_step_times=[2.0] * 5)
    assert (steady.low, steady.seconds, steady.high) == pytest.approx((20.0, 20.0, 20.0))
    open_ended = estimate_eta(step=5, total_steps=None, recent_step_times=[0.5, 0.5])
    assert open_ended.seconds is None
    assert open_ended.steps_per_second == pytest.approx(2.0)
    assert estimate_eta(step=5, total_steps=10, recent_step_times=[]).seconds is None
