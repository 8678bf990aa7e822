"""A start-up fault the agent read from torchrun's output (agent.job.startup_faults) is
shown as the agent raised it, on its host, and is over once that host's part of the job
starts again (a relaunch with the endpoint fixed)."""

from __future__ import annotations

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
