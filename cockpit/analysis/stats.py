"""Small robust statistics shared by the analysis rules.

Kept here (rather than numpy) so the analysis layer stays standard-library only and
works on the short, already-bounded lists the store hands over.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Scale that makes the median absolute deviation estimate a normal's standard deviation.
MAD_TO_SIGMA = 1.4826


def finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty sequence (q in [0, 1])."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * min(max(q, 0.0), 1.0)
    low = math.floor(pos)
    high = math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def mad_sigma(values: Sequence[float]) -> float:
    """Robust standard deviation: outliers (the spikes we look for) barely move it."""
    mid = median(values)
    return MAD_TO_SIGMA * median([abs(v - mid) for v in values])
