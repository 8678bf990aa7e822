"""Loss spikes: jumps far above what the recent curve predicts, by a robust z-score.

The prediction is the previous point plus the typical step-to-step change, and the
scale is the MAD of those changes over a trailing window. Working on differences keeps
a steadily falling (or rising) loss from looking like a spike or hiding one, as a
level-based z-score over a trending window would; median and MAD keep earlier spikes
from inflating the yardstick and masking the next one. On a downsampled series pass
the bucket maxima as `peaks`: a one-step spike survives bucketing in the maximum even
when the bucket's last value looks normal, and maxima are compared with maxima.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from cockpit.analysis.stats import finite, mad_sigma, median

WINDOW = 20
THRESHOLD = 6.0
MIN_HISTORY = 5
# Floor on the scale, relative to the level: a perfectly smooth loss has MAD 0 and would
# turn any wobble into an "infinite" z-score.
RELATIVE_FLOOR = 0.01


def robust_z(value: float, history: Sequence[float]) -> float:
    """How far `value` sits above the continuation of `history`, in robust sigmas."""
    steps = [b - a for a, b in itertools.pairwise(history)]
    expected = history[-1] + (median(steps) if steps else 0.0)
    spread = mad_sigma(steps) if steps else 0.0
    scale = max(spread, RELATIVE_FLOOR * abs(median(history)), 1e-12)
    return (value - expected) / scale


def find_spikes(
    xs: Sequence[float],
    values: Sequence[float | None],
    peaks: Sequence[float | None] | None = None,
    *,
    window: int = WINDOW,
    threshold: float = THRESHOLD,
    min_history: int = MIN_HISTORY,
) -> list[float]:
    """x of the first point of every upward spike (consecutive spiking points count once)."""
    if len(xs) != len(values) or (peaks is not None and len(peaks) != len(values)):
        raise ValueError("xs, values and peaks must have the same length")
    series = values if peaks is None else peaks
    found: list[float] = []
    in_spike = False
    for i, x in enumerate(xs):
        history = finite(series[max(0, i - window) : i])
        top = series[i]
        spiking = (
            len(history) >= min_history
            and top is not None
            and math.isfinite(top)
            and robust_z(top, history) > threshold
        )
        if spiking and not in_spike:
            found.append(x)
        in_spike = spiking
    return found
