"""An acknowledgement says "applied" only once the trainer did it, and "refused" (with
the reason) for what the trainer cannot do: the contract the framework adapters build on."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.hook import resume_checkpoint
from agent.wire.checkpoints import RESUME_ENV
from cockpit.analysis.markers import chart_markers
from cockpit.snapshot import Marker


def _append(tmp_path: Path, *knob_sets: dict, job: str = "job-a") -> Path:
    path = tmp_path / "run" / "control" / f"{job}.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for i, knobs in enumerate(knob_sets):
            f.write(json.dumps({"id": knobs.pop("id", f"k{i}"), "ts": time.time(),
                                "knobs": knobs}) + "\n")
    return path


def _acks(spool) -> list[dict]:
    return [e for e in spool("event") if e["kind"] == "control_ack"]


def test_a_knob_the_trainer_does_not_honour_is_refused_with_the_reason(
        make_reporter, spool, tmp_path) -> None:
    rep = make_reporter(honours=["lr_scale", "checkpoint_now"], honoured_by="the test adapter")
    rep.step(3, loss=1.0)
    _append(tmp_path, {"id": "e1", "eval_now": True},
            {"id": "m1", "lr_scale": 0.5, "dropout": 0.1})
    rep.poll_control()
    assert rep.take_request("eval_now") is False  # never handed to the trainer
    assert "dropout" not in rep.knobs and rep.lr_scale == 0.5
    rep.step(4, loss=1.0)
    rep.flush()
    refused, mixed = _acks(spool)
    assert refused["data"]["ok"] is False and refused["data"]["applied_step"] is None
    assert refused["msg"] == "refused eval_now: the test adapter does not apply eval_now"
    assert refused["data"]["error"] == "eval_now: the test adapter does not apply eval_now"
    assert mixed["step"] == 4 and mixed["data"]["ok"] is True
    assert mixed["data"]["knobs"] == {"lr_scale": 0.5}
    assert mixed["data"]["refused"] == {"dropout": "the test adapter does not apply dropout"}
    assert mixed["msg"] == ("applied lr_scale=0.5; refused dropout: the test adapter does "
                            "not apply dropout")
    # The chart marks what was applied, where it took effect; nothing for the refusal.
    assert chart_markers(spool("event")) == (Marker(4, "adjust", "lr_scale=0.5"),)


def test_one_shot_requests_are_acked_once_done_or_refused_never_when_taken(
        make_reporter, spool, tmp_path) -> None:
    rep = make_reporter()
    rep.step(7, loss=1.0)
    _append(tmp_path, {"id": "c", "checkpoint_now": True}, {"id": "e", "eval_now": True})
    rep.poll_control()
    assert rep.take_request("checkpoint_now") and rep.take_request("eval_now")
    rep.step(8, loss=1.0)
    rep.flush()
    assert _acks(spool) == []  # taken is not done
    rep.checkpoint_saved(str(tmp_path / "ck"), 8, 0.2, bytes=100)
    rep.flush()
    (saved,) = _acks(spool)
    assert (saved["data"]["id"], saved["step"], saved["msg"]) == (
        "c", 8, "applied checkpoint_now=True")
    rep.refuse_request("eval_now", "no evaluation data is set up")
    rep.flush()
    refused = _acks(spool)[-1]
    assert refused["data"]["id"] == "e" and refused["data"]["ok"] is False
    assert refused["msg"] == "refused eval_now: no evaluation data is set up"


def test_an_eval_record_completes_a_taken_eval_request(make_reporter, spool, tmp_path) -> None:
    rep = make_reporter()
    _append(tmp_path, {"id": "e", "eval_now": True})
    rep.poll_control(step=12)
    rep.eval(12, loss=2.0)  # a periodic eval before the request was taken: not it
    rep.flush()
    assert _acks(spool) == []
    assert rep.take_request("eval_now")
    rep.eval(13, loss=1.9)
    rep.flush()
    (ack,) = _acks(spool)
    assert ack["step"] == 13 and ack["data"]["knobs"] == {"eval_now": True}


def test_an_adapter_confirms_the_step_that_trained_with_the_knob(
        make_reporter, spool, tmp_path) -> None:
    """A Trainer writes one record per logging interval: the adapter says which step
    first ran with the new LR, and the record of the step it was applied at does not."""
    rep = make_reporter()
    _append(tmp_path, {"id": "l", "lr_scale": 0.1})
    rep.poll_control(step=20)
    rep.step(20, loss=1.0)  # the log of the step the control was agreed at
    rep.flush()
    assert _acks(spool) == []
    rep.controls_in_effect(21)
    rep.flush()
    (ack,) = _acks(spool)
    assert ack["step"] == 21 and ack["data"]["applied_step"] == 21


def test_a_knob_applied_and_never_trained_with_is_announced_by_the_next_process(
        make_reporter, spool, tmp_path) -> None:
    """Killed before a step ran with it: not acknowledged, so the next start says it."""
    rep = make_reporter()
    rep.step(5, loss=1.0)
    _append(tmp_path, {"id": "l", "lr_scale": 0.3})
    rep.poll_control()
    rep.close()
    assert _acks(spool) == []
    again = make_reporter()
    again.step(6, loss=1.0)
    again.flush()
    (ack,) = _acks(spool)
    assert ack["step"] == 6 and ack["data"]["at_start"] is True


def test_resumed_event_and_resume_env(make_reporter, spool, monkeypatch) -> None:
    monkeypatch.delenv(RESUME_ENV, raising=False)
    assert resume_checkpoint() is None
    monkeypatch.setenv(RESUME_ENV, "/ck/checkpoint-40")
    assert resume_checkpoint() == "/ck/checkpoint-40"
    rep = make_reporter()
    rep.resumed(40, "/ck/checkpoint-40/")
    rep.flush()
    (event,) = [e for e in spool("event") if e["kind"] == "resumed"]
    assert event["step"] == 40 and event["msg"] == "resumed from checkpoint-40 at step 40"
    assert event["data"] == {"path": "/ck/checkpoint-40/"}
    assert chart_markers([event]) == (Marker(40, "restart", event["msg"]),)


def test_a_trainer_that_applies_controls_itself_is_not_overtaken_by_step(
        make_reporter, spool, tmp_path) -> None:
    """An adapter agrees controls across ranks at steps of its own (`poll_control`):
    a `step()` at a log in between must not apply a line the ranks have not agreed on,
    or its ack would say "applied" before any rank used it."""
    rep = make_reporter(control_every=None, control_interval=3600.0)
    _append(tmp_path, {"id": "l", "lr_scale": 0.5})
    rep._read_control_file()  # as the flusher would, between two steps
    for step in (17, 18, 19):
        rep.step(step, loss=1.0)
        rep.controls_in_effect(step + 1)
    assert rep.lr_scale == 1.0
    rep.flush()
    assert _acks(spool) == []
    rep.poll_control(step=20)  # the ranks agree here
    assert rep.lr_scale == 0.5
    rep.controls_in_effect(21)
    rep.flush()
    assert [a["step"] for a in _acks(spool)] == [21]
    rep.control_every = 5
    assert rep.control_every == 5
    with pytest.raises(ValueError, match="control_every"):
        rep.control_every = 0


def test_a_line_without_knobs_is_answered_for_what_it_is(make_reporter, spool,
                                                          tmp_path) -> None:
    rep = make_reporter()
    _append(tmp_path, {"id": "none"})
    rep.poll_control(step=3)
    rep.flush()
    (ack,) = _acks(spool)
    assert ack["msg"] == "applied nothing: the line has no knobs" and ack["data"]["ok"] is True
