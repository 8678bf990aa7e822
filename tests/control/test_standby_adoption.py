"""A spare waiting in standby outlives its agent: a new agent adopts the standby and
takes up a claim made while no agent was running. No torchrun: the launch a takeover
starts is recorded instead of run (the takeover end to end is test_scale_e2e.py)."""

from __future__ import annotations

import time
from pathlib import Path

from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.membership import claim_spare
from agent.journal.journal import Journal, JournalReader
from agent.wire import jobstate
from tests.harness.elastic import NAME, elastic_spec
from tests.harness.waiting import wait_for


def spare_spec(tmp_path: Path, host: str = "c") -> dict:
    return elastic_spec(tmp_path, host, spares=("c",), rendezvous_host="a",
                        recovery='exclude_on = ["gpu_fault"]')


def standby_then_agent_killed(journal: Journal, spec: dict) -> dict:
    """A spare's agent puts the job in standby, then dies as with kill -9 (nothing more is
    saved); what it saved for the next agent."""
    first = ManagedJob(LaunchSpec(spec), journal)
    first.start(standby=True)
    saved = wait_for(lambda: (s := jobstate.read(jobstate.path(journal.state_dir, NAME)))
                     and s["state"] == "standby" and s, 10, "the standby to be saved")
    first._closing.set()
    first._commands.put(("close", {}))
    first._thread.join(5)  # type: ignore[union-attr]
    return saved


def adopted(journal: Journal, saved: dict) -> tuple[ManagedJob, list[str]]:
    """A new agent's job adopted from `saved`; the launches it asks for are recorded."""
    job = ManagedJob(LaunchSpec(saved["spec"]), journal, saved.get("overrides"))
    launched: list[str] = []
    job.launch = lambda checkpoint, reason="launch": launched.append(reason)  # type: ignore[method-assign]
    job.adopt(saved)
    return job, launched


def stop(job: ManagedJob) -> None:
    job._closing.set()
    job._commands.put(("close", {}))


def test_a_standby_spare_is_adopted_and_takes_up_a_claim_made_meanwhile(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "state")
    spec = spare_spec(tmp_path)
    saved = standby_then_agent_killed(journal, spec)
    assert saved["standby_since"] > 0
    # While no agent runs, host b's agent excludes b and claims the spare.
    assert claim_spare(LaunchSpec(spec), "b", "gpu_fault", ["a", "b"]) == "c"
    second, launched = adopted(journal, saved)
    wait_for(lambda: launched, 10, "the takeover")
    stop(second)
    assert launched == ["takeover"]
    events = [r for r in JournalReader(journal.state_dir).records(0) if r.get("t") == "event"]
    adoption = [e for e in events if e["kind"] == "job_adopted"]
    assert adoption and "still in standby" in adoption[0]["msg"]
    takeover = [e for e in events if e["kind"] == "takeover"]
    assert takeover and takeover[0]["data"]["replaced"] == "b"


def test_a_claim_from_before_the_standby_is_not_taken_up_after_adoption(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "state")
    spec = spare_spec(tmp_path)
    assert claim_spare(LaunchSpec(spec), "b", "gpu_fault", ["a", "b"]) == "c"  # stale
    time.sleep(0.01)
    saved = standby_then_agent_killed(journal, spec)
    second, launched = adopted(journal, saved)
    time.sleep(1.5)  # several looks at the claims
    stop(second)
    assert launched == [] and second.state == "standby"
