"""A start-up fault the agent read from torchrun's output (agent.job.startup_faults) is
shown as the agent raised it, on its host, and is over once that host's part of the job
starts again (a relaunch with the endpoint fixed), steps after it, or the operator ends
the job or takes the host out of it."""

from __future__ import annotations

from cockpit.analysis.alert_ends import operator_ends
from cockpit.analysis.alerts import stored_alerts

ROW = {"ts": 100.0, "host": "gpu1", "job": "j", "kind": "resource", "severity": "critical",
       "code": "rdzv_unresolvable", "where": {"endpoint": "gpu1:29400"},
       "what": "job j: the rendezvous endpoint gpu1:29400 does not resolve on this host",
       "hint": "use a name or address every host of the job resolves"}


def test_shown_with_where_and_what_to_try_until_that_host_starts_again() -> None:
    [alert] = stored_alerts([ROW])
    assert (alert.severity, alert.code) == ("critical", "rdzv_unresolvable")
    assert alert.where == "host gpu1 / endpoint gpu1:29400"
    assert alert.hint == ROW["hint"]
    # Another host starting does not end it; this host starting again does.
    assert stored_alerts([ROW], started_on={("j", "gpu2"): 200.0})
    assert stored_alerts([ROW], started_on={("j", "gpu1"): 200.0}) == []
    # A start before the fault (the attempt that hit it) does not.
    assert stored_alerts([ROW], started_on={("j", "gpu1"): 50.0})


def test_over_once_that_host_stepped_or_the_operator_ended_the_job() -> None:
    """A step by that host's part after the fault (the agent's own restart got through)
    ends it; a step marked for another alert or host does not. So do the operator's stop
    or pause of the job after it, and the host's leaving the job; before it, neither."""
    mark = ("j", "gpu1", 100.0)
    assert stored_alerts([ROW], stepped={mark}) == []
    assert stored_alerts([ROW], stepped={("j", "gpu2", 100.0), ("j", "gpu1", 99.0)})
    assert stored_alerts([ROW], stopped={"j": 150.0}) == []
    assert stored_alerts([ROW], stopped={"j": 50.0, "k": 150.0})
    assert stored_alerts([ROW], left={("j", "gpu1"): 150.0}) == []
    assert stored_alerts([ROW], left={("j", "gpu2"): 150.0})
    # An alert that only the operator's start ends is not ended by a stop or a step.
    gave_up = {**ROW, "code": "recovery_stopped"}
    assert stored_alerts([gave_up], stopped={"j": 150.0}, stepped={mark})


def test_operator_ends_reads_starts_stops_pauses_and_hosts_taken_out() -> None:
    """From lifecycle events as stored (`data` as JSON text or a dict): the agents' own
    recovery starts, a failed pause and an exit not ended by the operator are none."""
    def ev(kind: str, ts: float, host: str, data: object) -> dict:
        return {"kind": kind, "ts": ts, "host": host, "job": "j", "data": data}

    ends = operator_ends([
        ev("job_started", 10.0, "gpu1", {"reason": "relaunch"}),
        ev("job_started", 20.0, "gpu1", '{"reason": "recovery"}'),
        ev("job_exited", 30.0, "gpu2", '{"returncode": -15, "ended_for": "stop"}'),
        ev("pause", 40.0, "gpu1", {"ok": False}),
        ev("job_exited", 45.0, "gpu1", {"returncode": 1}),
        ev("relaunch", 50.0, "gpu2", {"excluded": True}),
    ])
    assert (ends.started, ends.started_on) == ({"j": 10.0}, {("j", "gpu1"): 10.0})
    assert ends.stopped == {"j": 30.0} and ends.left == {("j", "gpu2"): 50.0}
    assert operator_ends([ev("pause", 40.0, "gpu1", {"ok": True})]).stopped == {"j": 40.0}
