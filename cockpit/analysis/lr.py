"""The learning rate: what it is, how the operator changed it, and whether it looks too
high (loss trending up, or repeatedly unstable).

Both symptoms have other causes (bad data, a bug), so the alert says "looks" and names
the evidence. A loss that rises while the LR has been cut is not blamed on the LR.

The operator's changes are the trainer's acknowledgements of `lr_scale` (the chart's
adjustment markers); each is shown with the LR recorded before it and the LR of the
first record after it, which carries the scale: "lr_scale=0.1 at step 1,200: 0.0003 →
3e-05". The screen and the report word them alike (`lr_text`, `lr_change_text`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from cockpit.analysis.markers import ADJUST, knob_in_force
from cockpit.analysis.text import counted, printable
from cockpit.snapshot import LrChange, Marker

LR_KNOB = "lr_scale"

MIN_POINTS = 10
MIN_POINTS_AFTER_MIN = 3
RISE_OF_RANGE = 0.2  # rise since the minimum, as a share of the drop before it
MIN_RELATIVE_RISE = 0.02
LR_KEPT = 0.9  # LR now is at least this share of the LR at the loss minimum
UNSTABLE_EVENTS = 3
# The rise must stand out of the curve's own jitter: the median size of its second
# differences (a trend, straight or not, barely moves them; noise does). The curve is a
# light EMA (weight 0.6) of one step's loss per chart bucket, and on a flat stretch (after
# a resume or a fork's start, the drop before it is gone) its minimum and its last point
# alone lie up to about five such units apart: a rise of that size is noise.
NOISE_RISES = 8.0


def _clean(points: Sequence[tuple[float, float | None]]) -> list[tuple[float, float]]:
    return sorted((x, y) for x, y in points if y is not None and math.isfinite(y))


def _value_at(points: list[tuple[float, float]], x: float) -> float | None:
    before = [y for px, y in points if px <= x]
    return before[-1] if before else (points[0][1] if points else None)


def _jitter(values: Sequence[float]) -> float:
    """The median absolute second difference: the point-to-point noise of a curve."""
    diffs = sorted(abs(values[i + 1] - 2.0 * values[i] + values[i - 1])
                   for i in range(1, len(values) - 1))
    if not diffs:
        return 0.0
    mid = len(diffs) // 2
    return diffs[mid] if len(diffs) % 2 else (diffs[mid - 1] + diffs[mid]) / 2.0


def lr_looks_too_high(
    loss_smoothed: Sequence[tuple[float, float | None]],
    lr: Sequence[tuple[float, float | None]],
    *,
    spike_steps: Sequence[float] = (),
    nonfinite_steps: Sequence[float] = (),
    after_step: float | None = None,
) -> str | None:
    """The evidence as one sentence, or None. `after_step`: the newest restart (a resume,
    a fork's start): the loss before it, and its settling after a reload, say nothing
    of the LR now, so only the steps after it are read."""
    unstable = len(spike_steps) + len(nonfinite_steps)
    if unstable >= UNSTABLE_EVENTS:
        return (
            f"{counted(len(spike_steps), 'loss spike')} and "
            f"{counted(len(nonfinite_steps), 'non-finite loss', 'non-finite losses')} "
            "so far"
        )
    loss = _clean(loss_smoothed)
    rates = _clean(lr)
    if after_step is not None:
        loss = [(x, y) for x, y in loss if x > after_step]
    if len(loss) < MIN_POINTS or not rates:
        return None
    low_i = min(range(len(loss)), key=lambda i: loss[i][1])
    if len(loss) - 1 - low_i < MIN_POINTS_AFTER_MIN:
        return None
    first, (low_x, low), (last_x, last) = loss[0][1], loss[low_i], loss[-1]
    drop = first - low
    rise = last - low
    if rise <= 0 or rise < RISE_OF_RANGE * drop or rise < MIN_RELATIVE_RISE * abs(low):
        return None
    if rise < NOISE_RISES * _jitter([y for _, y in loss]):
        return None
    lr_then = _value_at(rates, low_x)
    lr_now = _value_at(rates, last_x)
    if lr_then is None or lr_now is None or lr_now <= 0 or lr_now < LR_KEPT * lr_then:
        return None
    return (
        f"smoothed train loss rose from {low:.4g} at step {low_x:.0f} to {last:.4g} at step "
        f"{last_x:.0f} while the LR stayed at {lr_now:.3g}"
    )


def lr_adjustment_steps(markers: Iterable[Marker]) -> list[int]:
    """The steps of the operator's LR changes among the chart's markers."""
    return [m.step for m in markers if _scale_of(m) is not None]


def _scale_of(marker: Marker) -> str | None:
    if marker.kind != ADJUST:
        return None
    for pair in marker.text.split(", "):
        key, _, value = pair.partition("=")
        if key == LR_KNOB:
            return value
    return None


def lr_changes(markers: Iterable[Marker],
               around: Mapping[int, tuple[float | None, float | None]]) -> tuple[LrChange, ...]:
    """The operator's LR changes among `markers`, by step, each with the LR recorded
    (before, after) it as `around` gives them by step (absent: not known)."""
    out = []
    for marker in markers:
        scale = _scale_of(marker)
        if scale is None:
            continue
        before, after = around.get(marker.step, (None, None))
        out.append(LrChange(marker.step, f"{LR_KNOB}={printable(scale)}",
                            _finite_or_none(before), _finite_or_none(after)))
    return tuple(sorted(out, key=lambda c: c.step))


def scale_in_force(markers: Iterable[Marker]) -> str | None:
    """The `lr_scale` the trainer last acknowledged, as text, or None when never set."""
    found = knob_in_force(markers, LR_KNOB)
    return None if found is None else printable(found)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def lr_value(value: float | None) -> str:
    """An LR as people write them: 0.0003, 3e-05, 1.5e-06."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3g}"


def lr_change_text(change: LrChange) -> str:
    """"lr_scale=0.1 at step 1,200: 0.0003 → 3e-05" (n/a where a record is missing: the
    step after the change not recorded yet)."""
    return (f"{change.text} at step {change.step:,}: {lr_value(change.before)} → "
            f"{lr_value(change.after)}")


def lr_text(last: float | None, scale: str | None) -> str:
    """"LR 3e-05 (lr_scale=0.1 in force)": the LR now, and the operator's scale if set."""
    held = f" ({LR_KNOB}={scale} in force)" if scale is not None else ""
    return f"LR {lr_value(last)}{held}"
