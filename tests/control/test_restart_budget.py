"""The job-wide restart budget per cause (agent.job.restart_budget), as pure pieces: the
hosts' restarts counted as failures of the job, the window, the generations, the policy
that stops on a spent budget, the spec fields on both sides, and the text the cockpit
shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.job.recovery import Diagnosis, RecoveryPolicy
from agent.job.restart_budget import JobBudget, failures, read_others, write_mine
from agent.wire.launch_spec import DEFAULTS
from cockpit.analysis.restart_budget import budget_text, newest_budget
from cockpit.control.jobspec import JobSpecError, parse_jobspec


def _entry(at: float, cause: str, host: str, generation: str | None = "g1") -> dict:
    return {"at": at, "cause": cause, "host": host, "generation": generation}


def test_one_failure_restarted_on_every_host_counts_once() -> None:
    # host a fails first (OOM); b's NCCL error 5 s later is its consequence; the next
    # failure, 600 s on, is another one.
    found = failures([_entry(100.0, "oom", "a"), _entry(105.0, "nccl", "b"),
                      _entry(700.0, "nccl", "b")])
    assert [(f["cause"], f["hosts"]) for f in found] == [("oom", ["a", "b"]),
                                                         ("nccl", ["b"])]
    # A restart loop on one host is one failure per restart, however fast.
    assert len(failures([_entry(t, "killed", "a") for t in (1.0, 2.0, 4.0)])) == 3


def test_the_budget_per_cause_counts_all_hosts_within_the_window() -> None:
    budget = JobBudget({"nccl": 2, "killed": 5}, window=3600.0, total=10, host="a")
    budget.record("nccl", 100.0, "g1")
    others = [_entry(1000.0, "nccl", "b"), _entry(1003.0, "nccl", "a"),
              _entry(50.0, "nccl", "b", generation="g0")]  # an earlier launch's
    # a's own at 1003 joins b's failure at 1000 (one failure, b's first): 2 of 2.
    judged = budget.judge("nccl", 2000.0, "g1", others, now=2000.0)
    assert (judged["used"], judged["limit"], judged["total_used"]) == (3, 2, 3)
    assert judged["spent"] == ("job-wide restart budget for nccl spent: 3 failure(s) in "
                               "1 h, 2 allowed")
    # An hour later the first two have left the window.
    later = budget.judge("nccl", 5000.0, "g1", others, now=5000.0)
    assert (later["used"], later["spent"]) == (1, None)
    # Another cause has its own count; the total counts every failure.
    killed = budget.judge("killed", 2000.0, "g1", others, now=2000.0)
    assert (killed["cause"], killed["used"], killed["total_used"]) == ("killed", 1, 3)
    small = JobBudget({}, window=3600.0, total=2, host="a")
    small.record("nccl", 100.0, "g1")
    assert "restart budget of 2 used up (3 failures over hosts a, b)" in str(
        small.judge("hang", 2000.0, "g1", others, now=2000.0)["spent"])


def test_the_policy_stops_on_a_spent_budget_and_says_why() -> None:
    policy = RecoveryPolicy(restart_budget=10, backoff=0.0, backoff_max=0.0)
    diagnosis = Diagnosis("killed", ["rank 0 killed by SIGKILL"])
    ok = policy.decide(diagnosis, {"cause": "killed", "used": 1, "limit": 2, "spent": None})
    assert ok.retry and ok.as_dict()["budget"]["used"] == 1
    stop = policy.decide(diagnosis, {"cause": "killed", "used": 3, "limit": 2,
                                     "spent": "job-wide restart budget for killed spent"})
    assert not stop.retry and stop.reason == "job-wide restart budget for killed spent"
    assert "spent" not in stop.as_dict()["budget"]
    assert stop.hint == diagnosis.hint  # what to look at, for the cause


def test_the_hosts_files_are_read_and_bad_ones_cost_only_themselves(tmp_path: Path) -> None:
    assert write_mine(tmp_path, "j", "a", [_entry(1.0, "oom", "a")]) is None
    write_mine(tmp_path, "j", "b", [_entry(2.0, "nccl", "b"), {"at": "x"}, 7])
    folder = tmp_path / "control" / "j.restarts"
    (folder / "c.json").write_text("not json")
    assert read_others(tmp_path, "j", "a") == [_entry(2.0, "nccl", "b")]


def test_both_sides_take_the_spec_fields_and_their_defaults() -> None:
    body = ('name = "j"\nhosts = ["h1"]\nnproc_per_node = 1\nscript = "t.py"\n'
            'run_dir = "/r"\n'
            '[recovery]\nwindow = 600\n[recovery.per_cause]\nnccl = 1\n')
    spec = parse_jobspec(body)
    launch = LaunchSpec(spec.for_host("h1"))
    assert launch.budget_window == spec.budget_window == 600
    assert launch.per_cause == spec.per_cause == {**dict(DEFAULTS["recovery.per_cause"]),
                                                  "nccl": 1}
    bare = LaunchSpec({"name": "j", "script": "t.py", "run_dir": "/r"})
    assert bare.per_cause == dict(DEFAULTS["recovery.per_cause"])
    assert bare.budget_window == DEFAULTS["recovery.window"]
    with pytest.raises(JobSpecError, match="unknown cause 'disk'"):
        parse_jobspec(body.replace("nccl = 1", "disk = 1"))
    with pytest.raises(JobSpecError, match=r"field 'recovery\.per_cause\.nccl': must be a whole"):
        parse_jobspec(body.replace("nccl = 1", "nccl = -1"))


def test_the_cockpit_shows_used_and_left_and_checks_what_a_host_sent() -> None:
    budget = {"cause": "killed", "used": 2, "limit": 3, "window": 3600.0, "total_used": 4,
              "total_limit": 10}
    assert budget_text(budget) == ("killed: 2 of 3 in 1h 00m (1 left); all causes: 4 of 10 "
                                   "(6 left), job-wide")
    assert budget_text({**budget, "used": "2", "total_used": True}) is None
    assert "this host's count only" in str(budget_text({**budget, "unread": "no answer"}))
    assert newest_budget([{"detected_at": 1.0, "budget": budget},
                          {"detected_at": 2.0, "budget": None}]) == budget_text(budget)
