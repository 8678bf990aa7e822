"""How an outage ends, and what it cost: the operator's stop is no failure, a host that
left the job need not recover, the job's next step ends what no recovery did, each
host's down time is on its own clock, and an operator start shows a fresh budget."""

from __future__ import annotations

from typing import Any

from agent.wire import launch_reasons
from agent.wire.events import JOB_EXITED, JOB_STARTED
from cockpit.analysis.alerts import interruption_alerts
from cockpit.analysis.incidents import merge_incidents
from cockpit.analysis.kpis import StepTotals, job_kpis, lost_spans, split_spans
from cockpit.analysis.restart_budget import newest_budget
from cockpit.snapshot import Interruption


def _item(host: str, cause: str, detected: float, *, latency: float = 0.0,
          recovered_at: float | None = None, recovered_in: float | None = None,
          **more: Any) -> dict[str, Any]:
    return {"host": host, "job": "j", "cause": cause, "detected_at": detected,
            "detection_latency": latency, "recovered_at": recovered_at,
            "recovered_in": recovered_in, "steps_lost": 5, "restart_count": 1,
            "ended_by": None, "failed_restarts": [], **more}


def _as_interruption(i: dict[str, Any]) -> Interruption:
    return Interruption(
        detected_at=i["detected_at"], cause=i["cause"], evidence=None,
        recovered_in=i["recovered_in"], steps_lost=i["steps_lost"],
        restart_count=i["restart_count"], hosts=tuple(i["hosts"]),
        ended_by=i["ended_by"])


# -- 1. the operator's scancel, as older recordings journaled it -------------------------


def test_an_old_scancel_interruption_is_the_operators_stop_not_an_outage() -> None:
    merged = merge_incidents([_item("slurm:j", "scancel", 500.0)])
    assert merged == []


def test_an_old_scancel_ends_the_outage_it_found_open() -> None:
    merged = merge_incidents([_item("n1", "oom", 100.0), _item("slurm:j", "scancel", 900.0)])
    assert [(i["cause"], i["ended_by"]) for i in merged] == [("oom", launch_reasons.FOR_STOP)]
    assert interruption_alerts([_as_interruption(merged[0])]) == []


# -- 2. outages the job came back from ------------------------------------------------------


def test_a_host_that_left_the_elastic_job_need_not_recover() -> None:
    merged = merge_incidents([
        _item("b", "gpu_fault", 1001.0, latency=1.0, excluded=True, gave_up=True),
        _item("a", "nccl", 1003.0, latency=3.0, recovered_at=1030.0, recovered_in=30.0),
    ])
    assert len(merged) == 1
    assert merged[0]["recovered_in"] == 30.0 and merged[0]["ended_by"] is None


def test_a_host_that_gave_up_while_its_peer_recovered_need_not_recover() -> None:
    merged = merge_incidents([
        _item("b", "killed", 100.0, gave_up=True),
        _item("a", "nccl", 101.0, recovered_at=140.0, recovered_in=40.0),
    ])
    assert merged[0]["recovered_in"] == 40.0


def test_every_host_gave_up_is_not_recovered() -> None:
    merged = merge_incidents([_item("b", "killed", 100.0, gave_up=True),
                              _item("a", "nccl", 101.0, gave_up=True)])
    assert merged[0]["recovered_in"] is None


def test_an_outage_no_recovery_ended_is_over_when_the_job_trains_again() -> None:
    # A Slurm requeue: the watcher's interruption, then the nodes' start and steps.
    merged = merge_incidents([_item("slurm:j", "slurm_requeue", 1000.0,
                                    came_back_at=1120.0)])
    assert merged[0]["recovered_at"] == 1120.0 and merged[0]["recovered_in"] == 120.0
    assert interruption_alerts([_as_interruption(merged[0])]) == []


def test_a_not_recovered_outage_ends_at_the_jobs_next_first_step() -> None:
    events = [{"kind": JOB_STARTED, "ts": 1100.0, "data": {}}]
    outage = [_item("slurm:j", "slurm_requeue", 1000.0)]
    spans = lost_spans(events, outage, {1100.0: 1120.0}, 5000.0)
    assert split_spans(spans, 0.0, 5000.0)["interruption"] == 120.0


def test_a_hosts_exit_while_its_peer_trains_on_is_not_a_stopped_job() -> None:
    events = [{"kind": JOB_STARTED, "job": "j", "ts": 0.0, "host": "a",
               "data": {"reason": launch_reasons.LAUNCH}},
              {"kind": JOB_EXITED, "job": "j", "ts": 1001.0, "host": "b",
               "data": {"returncode": 1}}]
    steps = StepTotals(records=399, first_ts=10.0, last_ts=3990.0, last_step=399,
                       step_time=3900.0)
    k = job_kpis("j", events=events, interruptions=[], steps=steps,
                 first_steps={0.0: 0.0, 1001.0: 1010.0}, gpus=1, gpus_from="assumed 1",
                 recording_end=4000.0)
    assert k.running and k.lost_s["stopped"] == 9.0
    assert k.productive_s + sum(k.lost_s.values()) <= k.span_s + 1e-6


# -- 3. down time on each host's own clock ---------------------------------------------


def test_a_merged_incidents_down_time_is_its_longest_hosts_own() -> None:
    # h1's rank hung (last step at 1000, detected at 1300, back 400 s after the hang);
    # h2's collectives failed at 1299 and it was back 102 s later.
    merged = merge_incidents([
        _item("h1", "hang", 1300.0, latency=300.0, recovered_at=1400.0, recovered_in=400.0),
        _item("h2", "nccl", 1300.5, latency=1.5, recovered_at=1401.0, recovered_in=102.0),
    ])
    assert merged[0]["recovered_in"] == 400.0


def test_clock_skew_between_hosts_does_not_add_to_the_down_time() -> None:
    # h2's clock runs 30 s ahead: each host was down 61 s.
    merged = merge_incidents([
        _item("h1", "killed", 100.0, recovered_at=161.0, recovered_in=61.0),
        _item("h2", "nccl", 130.0, recovered_at=191.0, recovered_in=61.0),
    ])
    assert merged[0]["recovered_in"] == 61.0


# -- 4. a fresh budget after the operator's start ---------------------------------------


def test_an_operator_start_shows_no_stale_budget() -> None:
    spent = {"cause": "killed", "used": 4, "limit": 3, "window": 3600,
             "total_used": 4, "total_limit": 10}
    outage = _item("n1", "killed", 100.0, budget=spent, ended_by=launch_reasons.RELAUNCH)
    assert newest_budget([outage]) is None
    assert newest_budget([{**outage, "ended_by": launch_reasons.FOR_PAUSE}]) is not None
    assert newest_budget([{**outage, "ended_by": None}]) is not None
