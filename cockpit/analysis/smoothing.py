"""Bias-corrected exponential moving average, as W&B and TensorBoard draw it.

A plain EMA started at zero drags the first points towards zero; dividing by
``1 - weight**n`` (the weight mass accumulated so far) removes that start-up bias, so
the smoothed curve starts on the data. Missing and non-finite points are passed through
unchanged and do not advance the average, so one NaN cannot poison the rest of the curve.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

DEFAULT_WEIGHT = 0.6  # TensorBoard's default slider position


def ema(values: Iterable[float | None], weight: float = DEFAULT_WEIGHT) -> list[float | None]:
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"EMA weight must be in [0, 1), got {weight!r}")
    out: list[float | None] = []
    acc = 0.0
    n = 0
    for value in values:
        if value is None or not math.isfinite(value):
            out.append(value)
            continue
        acc = acc * weight + (1.0 - weight) * value
        n += 1
        out.append(acc / (1.0 - weight**n))
    return out
