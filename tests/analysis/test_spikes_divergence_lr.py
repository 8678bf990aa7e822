from __future__ import annotations

import math
import random

import pytest

from cockpit.analysis.divergence import find_divergence
from cockpit.analysis.lr import lr_looks_too_high
from cockpit.analysis.smoothing import ema
from cockpit.analysis.spikes import find_spikes, robust_z


def _noisy_decay(n: int) -> list[float]:
    return [2.0 * math.exp(-i / 50) + 0.02 * math.sin(i * 1.7) + 0.5 for i in range(n)]


def test_spike_found_once_at_its_first_point() -> None:
    values = _noisy_decay(100)
    values[60] += 3.0
    values[61] += 2.5
    xs = [float(i * 10) for i in range(100)]
    assert find_spikes(xs, values) == [600.0]


def test_no_spike_in_a_smooth_noisy_curve_or_a_flat_one() -> None:
    xs = [float(i) for i in range(100)]
    assert find_spikes(xs, _noisy_decay(100)) == []
    assert find_spikes(xs, [1.0] * 100) == []


def test_earlier_spikes_do_not_mask_later_ones() -> None:
    values = [1.0 + 0.01 * (i % 3) for i in range(80)]
    values[30] = 9.0
    values[40] = 9.0
    assert find_spikes(list(range(80)), values) == [30, 40]


def test_bucket_peaks_reveal_a_spike_the_last_values_hide() -> None:
    last = [1.0 + 0.01 * (i % 4) for i in range(40)]
    peaks = [v + 0.02 for v in last]
    peaks[25] = 5.0
    assert find_spikes(list(range(40)), last) == []
    assert find_spikes(list(range(40)), last, peaks) == [25]


def test_spike_inputs_must_align() -> None:
    with pytest.raises(ValueError, match="same length"):
        find_spikes([1.0], [1.0, 2.0])


def test_robust_z_ignores_one_outlier_in_history() -> None:
    history = [1.0, 1.1, 0.9, 1.0, 50.0, 1.05, 0.95, 1.0]
    assert robust_z(3.0, history) > 6
    assert abs(robust_z(1.0, history)) < 1


def test_a_steep_trend_is_not_a_spike_either_way() -> None:
    falling = [10.0 - 0.5 * i for i in range(30)]
    rising = [1.0 + 0.5 * i for i in range(30)]
    assert find_spikes(list(range(30)), falling) == []
    assert find_spikes(list(range(30)), rising) == []
    rising[20] += 5.0
    assert find_spikes(list(range(30)), rising) == [20]


def test_divergence_starts_after_the_best_val_while_train_improves() -> None:
    val = [(100, 1.0), (200, 0.8), (300, 0.7), (400, 0.72), (500, 0.75), (600, 0.8)]
    train = [(float(s), 1.2 - s / 1000) for s in range(0, 801, 20)]
    # Three evaluations without a new best can be a noisy validation set: not yet.
    assert find_divergence(val, train).step is None
    val += [(700, 0.78), (800, 0.81)]
    d = find_divergence(val, train)
    assert d.best_step == 300 and d.best_loss == pytest.approx(0.7)
    assert d.step == 400
    assert d.evals_since_best == 5
    assert d.train_drop is not None and d.train_drop > 0.2


def test_plateau_in_both_is_not_divergence() -> None:
    val = [(100, 1.0), (200, 0.8), (300, 0.7), (400, 0.72), (500, 0.75), (600, 0.8)]
    flat_train = [(float(s), 0.5) for s in range(0, 601, 20)]
    assert find_divergence(val, flat_train).step is None


def test_val_still_improving_is_not_divergence_and_no_val_is_handled() -> None:
    val = [(100, 1.0), (200, 0.9), (300, 0.85)]
    train = [(float(s), 1.0 - s / 1000) for s in range(0, 301, 10)]
    assert find_divergence(val, train).step is None
    empty = find_divergence([], train)
    assert empty.best_step is None and empty.step is None


def test_lr_too_high_when_loss_rises_at_steady_lr() -> None:
    loss = [(float(i), 3.0 - 0.1 * i) for i in range(10)] + [
        (float(10 + i), 2.1 + 0.1 * i) for i in range(6)
    ]
    lr = [(0.0, 1e-3), (15.0, 1e-3)]
    reason = lr_looks_too_high(loss, lr)
    assert reason is not None and "rose" in reason


def test_lr_not_blamed_for_the_loss_around_a_restart() -> None:
    """A resume or a fork's start reloads a checkpoint: the loss before it and its
    settling after it are not evidence about the LR now."""
    loss = [(float(i), 3.0 - 0.1 * i) for i in range(10)] + [
        (float(10 + i), 2.1 + 0.1 * i) for i in range(6)
    ]
    lr = [(0.0, 1e-3), (15.0, 1e-3)]
    assert lr_looks_too_high(loss, lr, after_step=9.0) is None
    assert lr_looks_too_high(loss, lr, after_step=-1.0) is not None


def test_lr_not_blamed_when_it_was_cut_or_loss_keeps_falling() -> None:
    loss = [(float(i), 3.0 - 0.1 * i) for i in range(10)] + [
        (float(10 + i), 2.1 + 0.1 * i) for i in range(6)
    ]
    cut = [(0.0, 1e-3), (12.0, 1e-4)]
    assert lr_looks_too_high(loss, cut) is None
    falling = [(float(i), 3.0 - 0.1 * i) for i in range(20)]
    assert lr_looks_too_high(falling, [(0.0, 1e-3)]) is None


def test_lr_too_high_on_repeated_instability() -> None:
    reason = lr_looks_too_high([], [], spike_steps=[10, 20], nonfinite_steps=[30])
    assert reason is not None and "2 loss spikes" in reason


def test_lr_not_blamed_for_noise_on_a_flat_loss_after_a_restart() -> None:
    """After a fork's start the curve is flat and noisy (the chart's EMA of one step's
    loss per bucket): its lowest point and its last one lie apart by noise alone,
    however small the drop before."""
    noise = random.Random(7)
    raw = [1.6 - 0.0005 * i + noise.gauss(0.0, 0.15) for i in range(100)]
    xs = [600.0 + 7 * i for i in range(100)]
    lr = [(600.0, 2.7e-3), (1300.0, 2.6e-3)]
    flat = list(zip(xs, ema(raw), strict=True))
    assert lr_looks_too_high(flat, lr, after_step=600.0) is None
    # The same curve climbing well past its jitter is blamed.
    climbing = [y + 0.03 * max(i - 60, 0) for i, y in enumerate(raw)]
    assert lr_looks_too_high(list(zip(xs, ema(climbing), strict=True)), lr,
                             after_step=600.0) is not None
