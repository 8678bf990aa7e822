"""An elastic regroup after a lost peer is a restart of the job: it is counted against the
job-wide restart budget for its cause (`[recovery.per_cause]`, over all hosts) as the
agent's own restarts are, and refused once that is spent, the job then failing with an
alert that names the cause and the count. No torchrun: the regroup is driven through the
membership's own entry point, and the refused one's failure through the job's."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.recovery import Diagnosis
from agent.job.restart_budget import INCIDENT_S, read_others, write_mine
from agent.journal.journal import Journal, JournalReader
from agent.wire.causes import NCCL
from tests.harness.elastic import NAME, elastic_spec

GONE = Diagnosis(NCCL, ["[rank0]: RuntimeError: Connection reset by peer"], {"rank": 0})


def _job(tmp_path: Path, nccl_budget: int) -> ManagedJob:
    spec = elastic_spec(tmp_path, "a", hosts=("a", "b", "c"), recovery=(
        f"restart_budget = 10\n[recovery.per_cause]\nnccl = {nccl_budget}"))
    job = ManagedJob(LaunchSpec(spec), Journal(tmp_path / "state"))
    job.spec.prepare_dirs()
    job.state = "running"
    return job


def _records(job: ManagedJob, t: str, kind: str) -> list[dict]:
    key = "kind" if t == "event" else "code"
    return [r for r in JournalReader(job.journal.state_dir).records(0)
            if r.get("t") == t and r.get(key) == kind]


class _EndedTorchrun:
    """What `_failed` reads of an attempt whose torchrun the agent has just stopped."""

    running = False
    returncode = 1
    pid = 4242
    tail: collections.deque = collections.deque()

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


def test_a_regroup_is_counted_against_the_budget_of_its_cause_and_refused_once_spent(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path, nccl_budget=1)
    first = time.time()
    assert job.membership._begin(first, "peer_lost", GONE, failure_at=first) is True
    (regrouped,) = _records(job, "event", "interruption")
    decision = regrouped["data"]["decision"]
    assert decision["retry"] is True and decision["in_place"] is True
    assert (decision["budget"]["cause"], decision["budget"]["used"],
            decision["budget"]["limit"]) == (NCCL, 1, 1)
    assert "nccl: 1 of 1 job-wide" in regrouped["msg"]
    # Counted where the other hosts' agents read it.
    (mine,) = read_others(job.spec.shared_dir, NAME, "b")
    assert (mine["host"], mine["cause"]) == ("a", NCCL)

    # Another peer lost, a separate failure of the job: the budget for nccl is spent.
    job.membership.regroup = None
    second = first + INCIDENT_S + 1.0
    assert job.membership._begin(second, "peer_lost", GONE, failure_at=second) is False
    assert len(_records(job, "event", "interruption")) == 1  # no regroup said
    assert len(job.budget.state()) == 1 and job.policy.restarts == 1

    # Refused, it is this host's failure: the job stops and says which budget it spent.
    job.supervisor = _EndedTorchrun()  # type: ignore[assignment]
    assert job._failed(second, second, None, GONE) is None
    assert job.state == "failed"
    stopped = _records(job, "event", "interruption")[-1]["data"]["decision"]
    assert stopped["retry"] is False and stopped["budget"]["used"] == 2
    (alert,) = _records(job, "alert", "recovery_stopped")
    assert alert["what"] == (f"job {NAME} stopped after nccl: job-wide restart budget for "
                             "nccl spent: 2 failure(s) in 1 h, 1 allowed")


def test_another_hosts_restarts_spend_the_budget_a_regroup_needs(tmp_path: Path) -> None:
    job = _job(tmp_path, nccl_budget=1)
    now = time.time()
    # Host b's agent restarted its part after an nccl failure of the job a while ago.
    assert write_mine(job.spec.shared_dir, NAME, "b", [{
        "at": now - 10 * INCIDENT_S, "cause": NCCL, "host": "b",
        "generation": job.peers.generations.current}]) is None
    assert job.membership._begin(now, "peer_lost", GONE, failure_at=now) is False
    assert _records(job, "event", "interruption") == []
    assert job.budget.state() == []


def test_a_regroup_within_the_budget_leaves_room_for_the_next(tmp_path: Path) -> None:
    job = _job(tmp_path, nccl_budget=2)
    first = time.time()
    assert job.membership._begin(first, "peer_lost", GONE, failure_at=first) is True
    job.membership.regroup = None
    second = first + INCIDENT_S + 1.0
    assert job.membership._begin(second, "peer_lost", GONE, failure_at=second) is True
    used = [e["data"]["decision"]["budget"]["used"]
            for e in _records(job, "event", "interruption")]
    assert used == [1, 2]
