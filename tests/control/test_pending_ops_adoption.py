"""An operation acknowledged but not yet carried out outlives its agent: the agent killed
(-9) between the operator's stop (or pause) and its execution leaves it in the job's
saved state, and the adopting agent carries it out and says so, instead of letting the
job train on. The first agent's job thread never runs here, which is exactly an agent
killed before it got to the operation; the job's process, where there is one, is real."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.job.managed import ManagedJob
from agent.job.supervisor import Supervisor, alive
from agent.journal.journal import Journal, JournalReader
from agent.wire import jobstate
from agent.wire.states import BACKOFF, FROZEN, PAUSING, RUNNING
from cockpit.control.jobspec import parse_jobspec
from tests.harness.waiting import wait_for

NAME = "held"
# The job: trains (sleeps) until it is told to end.
JOB = "import time\nwhile True:\n    time.sleep(0.05)\n"


def _spec(tmp_path: Path) -> dict:
    text = textwrap.dedent(f"""\
        name = "{NAME}"
        hosts = ["a"]
        nnodes = 1
        nproc_per_node = 1
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(tmp_path / "train.py"))}
        run_dir = {json.dumps(str(tmp_path / "run" / NAME))}
    """)
    (tmp_path / "train.py").write_text("")
    return parse_jobspec(text, str(tmp_path / "job.toml")).for_host("a")


def _saved(journal: Journal) -> dict:
    saved = jobstate.read(jobstate.path(journal.state_dir, NAME))
    assert saved is not None
    return saved


def _events(journal: Journal, kind: str) -> list[dict]:
    return [r for r in JournalReader(journal.state_dir).records(0)
            if r.get("t") == "event" and r.get("kind") == kind and r.get("job") == NAME]


@pytest.fixture
def jobs() -> Iterator[list[ManagedJob]]:
    """The adopting agents' jobs, closed after the test (their processes with them)."""
    made: list[ManagedJob] = []
    yield made
    for job in made:
        job.close(1.0)


def _adopted(journal: Journal, saved: dict, jobs: list[ManagedJob]
             ) -> tuple[ManagedJob, list[str]]:
    """The new agent's job adopted from `saved`; any launch it asks for is recorded."""
    job = ManagedJob(LaunchSpec(saved["spec"]), journal, saved.get("overrides"))
    launched: list[str] = []
    job.launch = lambda checkpoint, reason="launch": launched.append(reason)  # type: ignore[method-assign]
    jobs.append(job)
    job.adopt(saved)
    return job, launched


def _first_agent(tmp_path: Path, state: str) -> tuple[ManagedJob, Journal]:
    """The killed agent's job, never run: its operations are accepted, never carried out."""
    journal = Journal(tmp_path / "state")
    job = ManagedJob(LaunchSpec(_spec(tmp_path)), journal)
    job.spec.prepare_dirs()
    job.state = state
    return job, journal


def test_a_stop_accepted_before_the_agent_was_killed_stops_the_adopted_job(
    tmp_path: Path, jobs: list[ManagedJob]
) -> None:
    first, journal = _first_agent(tmp_path, RUNNING)
    # The job's process, started by the first agent (its own journal: that agent is gone).
    sup = Supervisor([sys.executable, "-c", JOB], NAME, first.spec.run_dir,
                     Journal(tmp_path / "old"))
    pid = sup.start()
    first.supervisor = sup
    try:
        ack = first.request("stop", {"grace": 5.0})
        assert ack == {"job": NAME, "state": RUNNING}
        saved = _saved(journal)  # the agent is killed now: the stop was never carried out
        assert [op["action"] for op in saved["pending_ops"]] == ["stop"]
        assert saved["state"] == RUNNING and alive(pid)

        second, launched = _adopted(journal, saved, jobs)
        wait_for(lambda: second.state == "stopped", 20, "the stop carried out")
        wait_for(lambda: not alive(pid), 20, "the job's process to end")
    finally:
        if alive(pid):
            sup.stop(1.0)
    assert launched == []
    (adoption,) = _events(journal, "job_adopted")
    assert adoption["data"]["running"] is True and adoption["data"]["carried_over"] == ["stop"]
    assert "the stop it had accepted and not carried out" in adoption["msg"]
    exited = wait_for(lambda: [e for e in _events(journal, "job_exited")
                               if e["data"].get("pid") == pid], 20, "the job_exited")
    assert exited[-1]["data"]["ended_for"] == "stop"
    # Done: a third agent finds a stopped job with nothing left to carry out.
    after = wait_for(lambda: (s := _saved(journal))["state"] == "stopped" and s, 10,
                     "the stopped state saved")
    assert after["pending_ops"] == []


def test_a_stop_accepted_while_waiting_to_restart_cancels_the_restart(
    tmp_path: Path, jobs: list[ManagedJob]
) -> None:
    first, journal = _first_agent(tmp_path, BACKOFF)
    first.request("stop", {"grace": 1.0})
    saved = _saved(journal)
    second, launched = _adopted(journal, saved, jobs)
    wait_for(lambda: second.state == "stopped", 20, "the stop carried out")
    assert launched == []  # the restart that was due is not made
    (exited,) = _events(journal, "job_exited")
    assert "the restart is cancelled" in exited["msg"]


def test_a_pause_accepted_while_waiting_to_restart_pauses_the_adopted_job(
    tmp_path: Path, jobs: list[ManagedJob]
) -> None:
    first, journal = _first_agent(tmp_path, BACKOFF)
    first.request("pause", {"id": "op3", "freeze": False, "follow": False})
    saved = _saved(journal)
    assert saved["pending_ops"][0]["args"]["id"] == "op3"
    second, launched = _adopted(journal, saved, jobs)
    wait_for(lambda: second.state == "paused", 20, "the pause carried out")
    assert launched == []
    assert [e["data"]["carried_over"] for e in _events(journal, "job_adopted")] == [["pause"]]


def test_a_pause_the_previous_agent_had_begun_is_not_begun_again(
    tmp_path: Path, jobs: list[ManagedJob]
) -> None:
    first, journal = _first_agent(tmp_path, RUNNING)
    first.request("pause", {"id": "op4"})
    saved = dict(_saved(journal), state=PAUSING)  # killed while pausing
    _second, launched = _adopted(journal, saved, jobs)
    # No process was recorded: the job is launched again; the begun pause is over.
    wait_for(lambda: launched, 20, "the adoption")
    assert "carried_over" not in _events(journal, "job_adopted")[0]["data"]
    wait_for(lambda: _saved(journal)["pending_ops"] == [], 10, "the pause forgotten")


def test_a_thaw_that_no_longer_applies_is_refused_and_says_why(
    tmp_path: Path, jobs: list[ManagedJob]
) -> None:
    first, journal = _first_agent(tmp_path, FROZEN)
    first.request("thaw", {})
    saved = dict(_saved(journal), state=RUNNING)  # the freeze was over when it was saved
    _adopted(journal, saved, jobs)
    refused = wait_for(lambda: _events(journal, "thaw"), 20, "the thaw's answer")
    assert refused[0]["data"]["ok"] is False and refused[0]["data"]["carried_over"] is True
    assert "not frozen" in refused[0]["data"]["error"]


def test_saved_pending_operations_are_bounded_and_checked_on_load() -> None:
    kept = jobstate.pending_out([
        {"action": "pause", "args": {"id": {"not": "an id"}}, "at": 1.0},
        {"action": "stop", "args": {"grace": 2.0}, "at": 2.0},
        {"action": "stop", "args": {"grace": 9.0}, "at": 3.0},  # repeats the first
        {"action": "resume", "args": {}, "at": 4.0},  # not kept across agents
    ])
    assert kept == [{"action": "pause", "args": {"id": None}, "at": 1.0},
                    {"action": "stop", "args": {"grace": 2.0}, "at": 2.0}]
    assert jobstate.pending_in(kept) == (kept, [])
    assert jobstate.pending_in(None) == ([], [])
    assert jobstate.pending_in({"stop": 1})[0] == []
    ops, dropped = jobstate.pending_in([
        {"action": "stop", "args": {"grace": -1}},
        {"action": "pause", "args": {"hold": float("nan")}},
        {"action": "thaw", "args": {"rm": "-rf"}},
        {"action": "stop", "args": {"grace": 1}, "at": 5},
    ])
    assert ops == []  # only the first MAX_PENDING are read; each of those is unusable
    assert len(dropped) == 4 and "the first 3 are read" in dropped[0]
    ops, dropped = jobstate.pending_in([{"action": "stop", "args": {}, "at": True},
                                        {"action": "stop", "args": {"grace": 1}}])
    assert ops == [{"action": "stop", "args": {}, "at": None}]
    assert dropped == ["a second pending stop"]
