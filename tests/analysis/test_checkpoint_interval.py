from __future__ import annotations

import math

import pytest

from cockpit.analysis.checkpoint_interval import advise, daly_interval, young_interval
from cockpit.analysis.lifecycle import running_seconds

MIN, HOUR = 60.0, 3600.0


def test_daly_reproduces_the_reference_figures() -> None:
    assert daly_interval(5 * MIN, 24 * HOUR) / MIN == pytest.approx(117, abs=0.5)
    assert daly_interval(5 * MIN, 6 * HOUR) / MIN == pytest.approx(57, abs=0.5)


def test_young_first_order_differs_from_the_reference_figures() -> None:
    young = young_interval(5 * MIN, 24 * HOUR)
    assert young == pytest.approx(math.sqrt(2 * 300 * 86400))
    assert young / MIN == pytest.approx(120)
    assert (young - 5 * MIN) / MIN == pytest.approx(115)


def test_daly_caps_at_mtbf_when_checkpoints_are_too_expensive() -> None:
    assert daly_interval(3 * HOUR, HOUR) == HOUR


def test_bad_inputs_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="positive"):
        daly_interval(0.0, HOUR)


def test_advice_from_observed_interruptions_and_checkpoints() -> None:
    advice = advise(
        checkpoint_seconds=[290.0, 300.0, 310.0],
        checkpoint_ts=[0.0, 1800.0, 3600.0],
        interruptions=4,
        observed_seconds=24 * HOUR,
    )
    assert advice.cost_s == pytest.approx(300.0)
    assert advice.mtbf_s == pytest.approx(6 * HOUR)
    assert advice.interval_s == pytest.approx(daly_interval(300.0, 6 * HOUR))
    assert advice.current_interval_s == pytest.approx(1800.0)
    assert not advice.mtbf_is_lower_bound
    assert "57 min" in advice.text and "now every 30 min" in advice.text


def test_advice_without_interruptions_is_a_lower_bound() -> None:
    advice = advise(
        checkpoint_seconds=[300.0], checkpoint_ts=[10.0], interruptions=0,
        observed_seconds=24 * HOUR,
    )
    assert advice.mtbf_is_lower_bound
    assert advice.text.startswith("checkpoint no more often than every 117 min")


def test_advice_without_checkpoint_cost_says_why() -> None:
    advice = advise(checkpoint_seconds=[None], checkpoint_ts=[], interruptions=1,
                    observed_seconds=HOUR)
    assert advice.interval_s is None
    assert "no checkpoint" in advice.text


def test_now_is_the_recent_cadence_not_the_whole_runs() -> None:
    """A first run checkpointed every 10 s for an hour; the relaunch every 2 min: "now"
    says 2 min from its tenth checkpoint on, however long the first run was."""
    old = [10.0 * i for i in range(360)]
    new = [old[-1] + 120.0 * (i + 1) for i in range(10)]
    advice = advise(checkpoint_seconds=[1.0] * 370, checkpoint_ts=old + new,
                    interruptions=1, observed_seconds=2 * HOUR)
    assert advice.current_interval_s == pytest.approx(120.0)
    assert advice.text.endswith("now every 2 min")


def _event(ts: float, kind: str, host: str = "a", **data: object) -> dict[str, object]:
    return {"ts": ts, "kind": kind, "host": host, "job": "j", "data": data}


def test_mtbf_counts_the_time_the_job_ran_not_its_pause_nor_after_its_exit() -> None:
    # Ran 100 s, paused 500 s, ran 100 s more and exited; the recording went on 1000 s.
    events = [_event(0.0, "job_started"), _event(100.0, "job_exited"),
              _event(100.0, "pause", ok=True), _event(600.0, "resume"),
              _event(600.0, "job_started"), _event(700.0, "job_exited")]
    assert running_seconds(events, since=0.0, until=1700.0) == pytest.approx(200.0)


def test_mtbf_run_time_of_a_job_running_at_the_end_or_before_the_first_event() -> None:
    assert running_seconds([_event(50.0, "job_started")], since=0.0,
                           until=80.0) == pytest.approx(30.0)
    # Two hosts: the job runs while either does; one was running when recording began.
    events = [_event(10.0, "job_exited", host="a"), _event(20.0, "job_exited", host="b"),
              _event(30.0, "job_started", host="a")]
    assert running_seconds(events, since=0.0, until=40.0) == pytest.approx(30.0)
    assert running_seconds([], since=0.0, until=40.0) is None
    failed_pause = [_event(0.0, "job_started"), _event(5.0, "pause", ok=False)]
    assert running_seconds(failed_pause, since=0.0, until=40.0) == pytest.approx(40.0)


def test_now_every_leaves_out_a_gap_across_a_restart() -> None:
    """Checkpoints every 600 s; the job failed after the second and its recovery started
    at t=1500: the gap from 1200 to the recovered run's first one (2100) holds the
    outage, not the job's cadence."""
    a = advise(checkpoint_seconds=[10.0] * 4, checkpoint_ts=[600.0, 1200.0, 2100.0, 2700.0],
               interruptions=1, observed_seconds=2400.0, starts=[0.0, 1500.0])
    assert a.current_interval_s == pytest.approx(600.0)
    assert a.text.endswith("now every 10 min")
