"""The LR summary: the operator's LR changes among the chart's markers, each with the LR
recorded on either side, worded alike for the screen and the report."""

from __future__ import annotations

from cockpit.analysis.lr import (
    lr_adjustment_steps,
    lr_change_text,
    lr_changes,
    lr_text,
    lr_value,
    scale_in_force,
)
from cockpit.snapshot import LrChange, Marker

MARKERS = (
    Marker(100, "restart", "resumed from ckpt-00000100.pt"),
    Marker(300, "adjust", "lr_scale=0.5"),
    Marker(400, "adjust", "warmup=2"),  # a user knob: not the LR
    Marker(700, "adjust", "lr_scale=0.1, warmup=3"),
)


def test_only_lr_scale_adjustments_are_lr_changes() -> None:
    assert lr_adjustment_steps(MARKERS) == [300, 700]
    changes = lr_changes(MARKERS, {300: (3e-4, 1.5e-4), 700: (2e-4, None)})
    assert changes == (LrChange(300, "lr_scale=0.5", 3e-4, 1.5e-4),
                       LrChange(700, "lr_scale=0.1", 2e-4, None))
    assert scale_in_force(MARKERS) == "0.1"
    assert scale_in_force(MARKERS[:1]) is None


def test_an_lr_change_reads_as_the_step_and_the_lr_either_side() -> None:
    change = LrChange(1200, "lr_scale=0.1", 3e-4, 3e-5)
    assert lr_change_text(change) == "lr_scale=0.1 at step 1,200: 0.0003 → 3e-05"
    # The record after it not in yet: said, not guessed.
    assert lr_change_text(LrChange(1200, "lr_scale=0.1", 3e-4)) == \
        "lr_scale=0.1 at step 1,200: 0.0003 → n/a"
    assert lr_text(3e-5, "0.1") == "LR 3e-05 (lr_scale=0.1 in force)"
    assert lr_text(None, None) == "LR n/a"
    assert [lr_value(v) for v in (1.5e-06, 0.001, float("nan"))] == ["1.5e-06", "0.001", "n/a"]


def test_values_from_the_trainer_are_made_printable_and_unknown_lrs_dropped() -> None:
    hostile = (Marker(5, "adjust", "lr_scale=\x1b[2J0.5"),)
    (change,) = lr_changes(hostile, {5: (float("inf"), 1e-3)})
    assert "\x1b" not in change.text and change.before is None and change.after == 1e-3
    assert "\x1b" not in (scale_in_force(hostile) or "")
    assert lr_changes(hostile, {}) == (LrChange(5, change.text, None, None),)
