"""Divergence: validation loss stopped improving while training loss kept falling.

That pattern (over-fitting, or a train/val distribution shift) is the moment to stop,
roll back to the best checkpoint, or regularise. A flat train loss with a flat val loss
is a plateau, not a divergence, so both conditions are required.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PATIENCE = 3  # evaluations without a new best before val counts as "stopped improving"
# Relative train-loss fall since the best val that counts as "train still improving".
MIN_TRAIN_DROP = 0.01
MIN_VAL_GAIN = 0.0  # relative gain a val loss needs to count as a new best
TRAIN_AVG_POINTS = 3  # train points averaged at each end (smooths bucket noise)


@dataclass(frozen=True)
class Divergence:
    step: int | None  # first evaluation after the best one, when diverging; else None
    best_step: int | None
    best_loss: float | None
    evals_since_best: int
    train_drop: float | None  # relative train-loss fall since the best val step


def find_divergence(
    val: Sequence[tuple[int, float | None]],
    train: Sequence[tuple[float, float | None]],
    *,
    patience: int = PATIENCE,
    min_train_drop: float = MIN_TRAIN_DROP,
    min_val_gain: float = MIN_VAL_GAIN,
) -> Divergence:
    """`val`: (step, val loss) per evaluation; `train`: (step, train loss), any density."""
    points = sorted((s, v) for s, v in val if v is not None and math.isfinite(v))
    if not points:
        return Divergence(None, None, None, 0, None)
    best_i = 0
    for i, (_, loss) in enumerate(points[1:], 1):
        if loss < points[best_i][1] - abs(points[best_i][1]) * min_val_gain:
            best_i = i
    best_step, best_loss = points[best_i]
    since = len(points) - 1 - best_i
    curve = sorted((x, y) for x, y in train if y is not None and math.isfinite(y))
    before = [y for x, y in curve if x <= best_step][-TRAIN_AVG_POINTS:]
    after = [y for x, y in curve if x > best_step][-TRAIN_AVG_POINTS:]
    drop = None
    if before and after:
        at_best = sum(before) / len(before)
        now = sum(after) / len(after)
        drop = (at_best - now) / abs(at_best) if at_best else None
    diverging = since >= patience and drop is not None and drop >= min_train_drop
    step = points[best_i + 1][0] if diverging else None
    return Divergence(step, best_step, best_loss, since, drop)
