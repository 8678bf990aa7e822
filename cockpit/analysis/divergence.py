"""Divergence: validation loss stopped improving while training loss kept falling.

That pattern (over-fitting, or a train/val distribution shift) is the moment to stop,
roll back to the best checkpoint, or regularise. A flat train loss with a flat val loss
is a plateau, not a divergence, so both conditions are required.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Evaluations without a new best before val counts as "stopped improving": a small
# validation set is noisy, and three evaluations of it said "diverging" too early.
PATIENCE = 5
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


@dataclass(frozen=True)
class BestValidation:
    """What the evaluations alone say: their best and how long ago it was."""

    step: int
    loss: float
    evals_since: int
    next_step: int | None  # the evaluation right after the best one


def best_validation(
    val: Sequence[tuple[int, float | None]], *, min_val_gain: float = MIN_VAL_GAIN
) -> BestValidation | None:
    """The best finite val loss (the first one, on ties). Kept apart from the train
    side so a caller can remember it until a new evaluation arrives."""
    points = sorted((s, v) for s, v in val if v is not None and math.isfinite(v))
    if not points:
        return None
    best_i = 0
    for i, (_, loss) in enumerate(points[1:], 1):
        if loss < points[best_i][1] - abs(points[best_i][1]) * min_val_gain:
            best_i = i
    since = len(points) - 1 - best_i
    nxt = points[best_i + 1][0] if since else None
    return BestValidation(points[best_i][0], points[best_i][1], since, nxt)


def find_divergence(
    val: Sequence[tuple[int, float | None]],
    train: Sequence[tuple[float, float | None]],
    *,
    patience: int = PATIENCE,
    min_train_drop: float = MIN_TRAIN_DROP,
    min_val_gain: float = MIN_VAL_GAIN,
) -> Divergence:
    """`val`: (step, val loss) per evaluation; `train`: (step, train loss), any density."""
    return divergence_after(best_validation(val, min_val_gain=min_val_gain), train,
                            patience=patience, min_train_drop=min_train_drop)


def divergence_after(
    best: BestValidation | None,
    train: Sequence[tuple[float, float | None]],
    *,
    patience: int = PATIENCE,
    min_train_drop: float = MIN_TRAIN_DROP,
) -> Divergence:
    """The divergence verdict from the best evaluation and the train curve."""
    if best is None:
        return Divergence(None, None, None, 0, None)
    curve = sorted((x, y) for x, y in train if y is not None and math.isfinite(y))
    before = [y for x, y in curve if x <= best.step][-TRAIN_AVG_POINTS:]
    after = [y for x, y in curve if x > best.step][-TRAIN_AVG_POINTS:]
    drop = None
    if before and after:
        at_best = sum(before) / len(before)
        now = sum(after) / len(after)
        drop = (at_best - now) / abs(at_best) if at_best else None
    diverging = best.evals_since >= patience and drop is not None and drop >= min_train_drop
    step = best.next_step if diverging else None
    return Divergence(step, best.step, best.loss, best.evals_since, drop)
