"""Operator controls reaching the trainer through the job's control file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cockpit.analysis.markers import chart_markers, knob_in_force
from cockpit.snapshot import Marker


def _control_file(tmp_path: Path, job: str = "job-a") -> Path:
    path = tmp_path / "run" / "control" / f"{job}.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _append(path: Path, *lines: dict | str) -> None:
    with open(path, "a") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def _acks(spool) -> list[dict]:
    return [e for e in spool("event") if e["kind"] == "control_ack"]


def test_lr_scale_is_applied_and_acknowledged(make_reporter, spool, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    rep.step(10, loss=1.0)
    assert rep.lr_scale == 1.0
    _append(path, {"id": "c1", "ts": time.time(), "knobs": {"lr_scale": 0.5}})
    applied = rep.poll_control()
    assert applied == [{"id": "c1", "knobs": {"lr_scale": 0.5}, "ok": True, "error": None}]
    assert rep.lr_scale == 0.5 and rep.knobs == {"lr_scale": 0.5}
    assert rep.poll_control() == []  # each line once
    rep.flush()
    assert _acks(spool) == []  # not applied before a step has run with it
    rep.step(11, loss=1.0)
    rep.flush()
    (ack,) = _acks(spool)
    assert ack["step"] == 11
    assert ack["data"] == {"id": "c1", "op": "adjust", "ok": True, "applied_step": 11,
                           "knobs": {"lr_scale": 0.5}}


def test_controls_apply_at_a_step_boundary_without_polling(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter(flush_interval=0.02, control_interval=0.02)
    _append(path, {"id": "c1", "ts": time.time(), "knobs": {"lr_scale": 2.0}})
    step, deadline = 0, time.monotonic() + 30
    while rep.lr_scale == 1.0 and time.monotonic() < deadline:
        step += 1
        rep.step(step, loss=1.0)
        time.sleep(0.01)
    assert rep.lr_scale == 2.0


def test_a_trainer_that_agrees_controls_every_n_steps_has_them_acked_there(
        make_reporter, spool, tmp_path) -> None:
    """charlm adopts controls where its ranks agree (every 5 steps): an LR scale that
    arrived at step 492 is taken at 495 and trains step 496 first, where its marker
    belongs, not at 492. A knob restored at start is in force from the first step
    whatever its number."""
    path = _control_file(tmp_path)
    rep = make_reporter(control_every=5, control_interval=3600.0)
    rep.step(491, loss=1.0)
    _append(path, {"id": "c1", "ts": time.time(), "knobs": {"lr_scale": 0.5}})
    rep._read_control_file()  # as the flusher would, between two steps
    for step in range(492, 497):
        rep.step(step, loss=1.0)
        assert rep.lr_scale == (0.5 if step >= 495 else 1.0), step
    rep.close()
    (ack,) = _acks(spool)
    assert ack["step"] == 496 and ack["data"]["applied_step"] == 496
    _append(path, {"id": "c2", "ts": time.time(), "knobs": {"lr_scale": 0.25}})  # paused
    again = make_reporter(control_every=5)
    assert again.lr_scale == 0.25
    again.step(497, loss=1.0)
    again.flush()
    assert [(a["data"]["id"], a["step"]) for a in _acks(spool)] == [("c1", 496), ("c2", 497)]
    with pytest.raises(ValueError, match="control_every"):
        make_reporter(control_every=0)


def test_one_shot_requests_are_taken_once(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"checkpoint_now": True, "eval_now": True}})
    rep.poll_control()
    assert rep.take_request("checkpoint_now") is True
    assert rep.take_request("checkpoint_now") is False
    assert rep.take_request("eval_now") is True
    assert rep.take_request("eval_now") is False
    assert "checkpoint_now" not in rep.knobs


def test_user_knobs_are_kept(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"dropout": 0.2}})
    _append(path, {"id": "c2", "ts": 2.0, "knobs": {"dropout": 0.1, "mix": "b"}})
    rep.poll_control()
    assert rep.knobs == {"lr_scale": 1.0, "dropout": 0.1, "mix": "b"}


@pytest.mark.parametrize(
    ("line", "ident", "error"),
    [
        ({"id": "c1", "ts": 1.0, "knobs": {"lr_scale": -1}}, "c1", "lr_scale must be a positive"),
        ({"id": "c2", "ts": 1.0, "knobs": {"lr_scale": "half"}}, "c2", "lr_scale must be"),
        ({"id": "c3", "ts": 1.0, "knobs": {"eval_now": "yes"}}, "c3", "eval_now must be true"),
        ({"id": "c4", "ts": 1.0, "knobs": [1]}, "c4", "'knobs' must be an object"),
        ("{not json", None, "not a JSON line"),
    ],
)
def test_bad_controls_are_refused_with_a_reason(
    make_reporter, spool, tmp_path, line, ident, error
) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    _append(path, line, {"id": "ok", "ts": 2.0, "knobs": {"lr_scale": 0.25}})
    applied = rep.poll_control()
    assert [a["ok"] for a in applied] == [False, True]
    assert rep.lr_scale == 0.25
    rep.step(1, loss=1.0)
    rep.flush()
    refused, accepted = _acks(spool)
    assert refused["data"]["id"] == ident and refused["data"]["ok"] is False
    assert error in refused["data"]["error"]
    assert "job-a.ndjson line 1" in refused["data"]["error"]
    assert accepted["data"]["ok"] is True


def test_a_line_without_its_newline_waits(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    text = json.dumps({"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.5}})
    with open(path, "a") as f:
        f.write(text[:20])
    assert rep.poll_control() == []
    with open(path, "a") as f:
        f.write(text[20:] + "\n")
    assert [a["id"] for a in rep.poll_control()] == ["c1"]
    assert rep.lr_scale == 0.5


def test_restart_restores_lasting_knobs_and_drops_stale_requests(
    make_reporter, spool, tmp_path
) -> None:
    path = _control_file(tmp_path)
    first = make_reporter()
    first.step(5, loss=1.0)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.5, "checkpoint_now": True}})
    _append(path, {"id": "c2", "ts": 2.0, "knobs": {"tau": 3}})
    assert len(first.poll_control()) == 2
    first.step(6, loss=1.0)  # trained with lr_scale and tau: c2 is done
    assert first.take_request("checkpoint_now")
    first.checkpoint_saved(str(tmp_path / "ck-6"), 6, 0.1, bytes=10)  # and so is c1
    first.close()
    assert [a["data"]["id"] for a in _acks(spool)] == ["c2", "c1"]
    acked = len(_acks(spool))
    rep = make_reporter()
    assert rep.lr_scale == 0.5 and rep.knobs["tau"] == 3
    assert rep.take_request("checkpoint_now") is False
    assert rep.poll_control() == []
    rep.step(6, loss=1.0)
    rep.flush()
    assert len(_acks(spool)) == acked  # acknowledged by the process that applied them first
    _append(path, {"id": "c3", "ts": 3.0, "knobs": {"lr_scale": 1.0}})
    assert [a["id"] for a in rep.poll_control()] == ["c3"]


def test_a_knob_set_while_no_process_ran_is_acknowledged_at_the_first_step(
    make_reporter, spool, tmp_path
) -> None:
    """An adjust during a pause: the resumed process trains with it from its first step
    and says so there, or the cockpit never shows the knob in force."""
    path = _control_file(tmp_path)
    first = make_reporter()
    first.step(40, loss=1.0)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"checkpoint_now": True}})  # the pause's
    first.poll_control()
    assert first.take_request("checkpoint_now")
    first.checkpoint_saved(str(tmp_path / "ck-40"), 40, 0.5, bytes=10)
    first.close()
    _append(path, {"id": "c2", "ts": 2.0, "knobs": {"lr_scale": 0.5, "eval_now": True}})
    rep = make_reporter()
    assert rep.lr_scale == 0.5  # in force before the first step, not from a later one
    assert rep.take_request("eval_now") is False
    assert rep.poll_control() == []  # not applied now: in force since the start
    rep.flush()
    assert [a["data"]["id"] for a in _acks(spool)] == ["c1"]  # no step yet to place it at
    rep.step(41, loss=1.0)
    rep.flush()
    ack = _acks(spool)[-1]
    assert ack["step"] == 41 and ack["rank"] == 0
    assert ack["msg"].startswith("applied lr_scale=0.5 (set while the job was not running)")
    assert "eval_now dropped" in ack["msg"]
    assert ack["data"] == {"id": "c2", "op": "adjust", "ok": True, "applied_step": 41,
                           "at_start": True, "knobs": {"lr_scale": 0.5},
                           "dropped": ["eval_now"]}
    rep.step(42, loss=1.0)
    rep.flush()
    assert len(_acks(spool)) == 2  # once


def test_the_cockpit_shows_a_knob_set_while_paused_in_force(make_reporter, spool,
                                                            tmp_path) -> None:
    """The pause/adjust/resume of `cockpit demo`: a marker at the resumed process's first
    step, and the LR prompt's 'now' reads 0.5, not the configured value."""
    path = _control_file(tmp_path)
    running = make_reporter()
    running.step(10, loss=1.0)
    _append(path, {"id": "a1", "ts": 1.0, "knobs": {"lr_scale": 2.0}})
    running.poll_control()
    running.step(11, loss=1.0)
    running.close()
    _append(path, {"id": "a2", "ts": 2.0, "knobs": {"lr_scale": 0.5}})  # while paused
    resumed = make_reporter()
    resumed.step(12, loss=1.0)
    resumed.close()
    markers = chart_markers(spool("event"))
    assert markers == (Marker(11, "adjust", "lr_scale=2.0"),
                       Marker(12, "adjust", "lr_scale=0.5"))
    assert knob_in_force(markers, "lr_scale") == "0.5"


def test_a_knob_is_announced_by_one_start_only(make_reporter, spool, tmp_path) -> None:
    """A restart long after the adjust restores the knob without a second chart marker."""
    path = _control_file(tmp_path)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.25}})
    resumed = make_reporter()
    resumed.step(11, loss=1.0)
    resumed.close()
    for step in (21, 31):  # two crash restarts
        again = make_reporter()
        assert again.lr_scale == 0.25
        again.step(step, loss=1.0)
        again.close()
    assert [(a["step"], a["data"]["id"]) for a in _acks(spool)] == [(11, "c1")]


def test_only_rank0_keeps_the_ledger(make_reporter, spool, tmp_path) -> None:
    path = _control_file(tmp_path)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.25}})
    rank1 = make_reporter(rank=1)
    rank1.step(11, loss=1.0)
    rank1.close()
    assert not path.with_name("job-a.acked.json").exists()
    rank0 = make_reporter()
    rank0.step(11, loss=1.0)
    rank0.close()
    assert json.loads(path.with_name("job-a.acked.json").read_text()) == {"lines": 1}


@pytest.mark.parametrize("ledger", ["{broken", json.dumps({"lines": 9})])
def test_a_damaged_or_stale_ledger_announces_rather_than_hides(
    make_reporter, spool, tmp_path, ledger
) -> None:
    """A ledger counting more lines than the file has belongs to a replaced file."""
    path = _control_file(tmp_path)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.25}})
    path.with_name("job-a.acked.json").write_text(ledger)
    rep = make_reporter()
    rep.step(3, loss=1.0)
    rep.flush()
    assert [a["data"]["id"] for a in _acks(spool)] == ["c1"]


def test_a_bad_line_written_while_no_process_ran_is_refused_at_the_first_step(
    make_reporter, spool, tmp_path
) -> None:
    path = _control_file(tmp_path)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": -2}}, "{not json",
            {"id": "c3", "ts": 1.0, "knobs": {"checkpoint_now": True}})
    rep = make_reporter()
    assert rep.lr_scale == 1.0
    rep.step(7, loss=1.0)
    rep.flush()
    acks = _acks(spool)
    # c3 asks only a one-shot checkpoint of a process that is gone: dropped without an
    # ack (the pause's own request looks the same when its ack could not be written).
    assert [(a["data"]["id"], a["data"]["ok"]) for a in acks] == [
        ("c1", False), (None, False)]
    assert "job-a.ndjson line 1: lr_scale must be a positive" in acks[0]["data"]["error"]
    assert "job-a.ndjson line 2: not a JSON line" in acks[1]["data"]["error"]


def test_replaced_control_file_is_read_from_the_top(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    rep = make_reporter()
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.5}})
    rep.poll_control()
    replacement = path.with_suffix(".new")
    _append(replacement, {"id": "c9", "ts": 2.0, "knobs": {"lr_scale": 0.125}})
    replacement.replace(path)
    assert [a["id"] for a in rep.poll_control()] == ["c9"]
    assert rep.lr_scale == 0.125


def test_control_disabled_reads_nothing(make_reporter, tmp_path) -> None:
    path = _control_file(tmp_path)
    _append(path, {"id": "c1", "ts": 1.0, "knobs": {"lr_scale": 0.5}})
    rep = make_reporter(control=False)
    assert rep.lr_scale == 1.0
    assert rep.poll_control() == []
    assert rep.lr_scale == 1.0
