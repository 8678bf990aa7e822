"""What goes on the loss chart as an intervention: lasting adjustments and restarts."""

from __future__ import annotations

from typing import Any

from cockpit.analysis import markers as mk
from cockpit.snapshot import Marker


def ack(step: int | None, msg: str, rank: int | None = 0, **data: Any) -> dict[str, Any]:
    return {"kind": "control_ack", "step": step, "rank": rank, "msg": msg,
            "data": {"op": "adjust", "ok": True, **data}}


def test_lasting_knobs_are_marked_one_shot_requests_are_not() -> None:
    events = [
        ack(120, "applied lr_scale=0.5", knobs={"lr_scale": 0.5}),
        ack(130, "applied checkpoint_now=True", knobs={"checkpoint_now": True}),
        ack(140, "applied eval_now=True, warmup=3", knobs={"eval_now": True, "warmup": 3}),
    ]
    assert mk.chart_markers(events) == (Marker(120, "adjust", "lr_scale=0.5"),
                                        Marker(140, "adjust", "warmup=3"))


def test_recordings_without_knobs_in_the_ack_are_read_from_its_message() -> None:
    assert mk.marker_of(ack(7, "applied eval_now=True, lr_scale=0.25")) == \
        Marker(7, "adjust", "lr_scale=0.25")
    assert mk.marker_of(ack(7, "applied checkpoint_now=True")) is None


def test_a_knob_set_while_the_job_was_not_running_is_marked_where_it_took_effect() -> None:
    at_start = ack(41, "applied lr_scale=0.5 (set while the job was not running); eval_now "
                   "dropped: a one-shot request made while the job was not running is not "
                   "carried over to its new start", knobs={"lr_scale": 0.5},
                   applied_step=41, at_start=True, dropped=["eval_now"])
    markers = mk.chart_markers([at_start])
    assert markers == (Marker(41, "adjust", "lr_scale=0.5"),)
    assert mk.knob_in_force(markers, "lr_scale") == "0.5"


def test_what_is_not_an_intervention_in_the_curve() -> None:
    agent_side = ack(None, "control op adjust done", rank=None)  # sent, not yet applied
    refused = ack(9, "refused control: lr_scale must be positive", ok=False)
    no_step = ack(None, "applied lr_scale=2", knobs={"lr_scale": 2})
    other = {"kind": "checkpoint_saved", "step": 100, "rank": 0, "msg": "", "data": {}}
    assert mk.chart_markers([agent_side, refused, no_step, other]) == ()


def test_restarts_are_marked_where_the_curve_picks_up() -> None:
    resumed = {"kind": "resumed", "step": 1000, "rank": 0,
               "msg": "resumed from ckpt-00001000.pt at step 1000", "data": {}}
    assert mk.chart_markers([resumed, dict(resumed)]) == (
        Marker(1000, "restart", "resumed from ckpt-00001000.pt at step 1000"),)


def test_held_markers_are_merged_and_the_newest_steps_kept() -> None:
    held = tuple(Marker(s, "restart", f"r{s}") for s in range(mk.MARKER_LIMIT))
    new = ack(10_000, "applied lr_scale=0.5", knobs={"lr_scale": 0.5})
    merged = mk.chart_markers([new], held=held)
    assert len(merged) == mk.MARKER_LIMIT
    assert merged[-1] == Marker(10_000, "adjust", "lr_scale=0.5") and merged[0].step == 1


def test_the_knob_in_force_is_the_newest_acknowledged() -> None:
    markers = (Marker(10, "adjust", "lr_scale=0.5"), Marker(20, "restart", "resumed"),
               Marker(30, "adjust", "dropout=0.2, lr_scale=0.25"),
               Marker(40, "adjust", "dropout=0.1"))
    assert mk.knob_in_force(markers, "lr_scale") == "0.25"
    assert mk.knob_in_force(markers, "dropout") == "0.1"
    assert mk.knob_in_force(markers, "warmup") is None
    assert mk.knob_in_force((), "lr_scale") is None
