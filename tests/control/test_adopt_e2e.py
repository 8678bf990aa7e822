"""The agent daemon is killed with -9 while it supervises a 2-rank torchrun job of the
example trainer: the job trains on, a restarted daemon adopts it (same pids), journals
its records with no gap and no repeat, operates it, and recovers it from a rank crash;
a crash while no daemon runs is recovered by the next one, from the exit status the
job's wrapper wrote down; a stop left undone by a killed daemon is carried out by the
next one."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.wire import jobstate

from .conftest import AgentDaemon, charlm_spec, children, process_alive

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(240)]


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[AgentDaemon]]:
    """The daemons of one state dir, one after the other; the job's processes are ended
    after the test even when no daemon is left to do it."""
    started: list[AgentDaemon] = []
    yield started
    pids = set()
    for d in started:
        for e in d.events("job_started"):
            pids.add(e["data"]["pid"])
            pids.update(children(e["data"]["pid"]))
    for d in started:
        d.close()
    for pid in pids:
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _kill_daemon(d: AgentDaemon) -> None:
    d.proc.kill()
    d.proc.wait(10)


def test_killed_agent_is_replaced_and_the_new_one_adopts_the_job(
    tmp_path: Path, daemons: list[AgentDaemon], charlm_shards: Path
) -> None:
    state, job = tmp_path / "state", "adopt"
    spec = charlm_spec(tmp_path, charlm_shards, job, steps=100000)
    d1 = AgentDaemon(state)
    daemons.append(d1)
    d1.op("launch", spec=spec)
    started = d1.wait_for(lambda: d1.event("job_started", lambda e: e["job"] == job), 60,
                          "the job")  # fmt: skip
    torchrun = started["data"]["pid"]
    ranks = d1.wait_for(lambda: children(torchrun) if len(children(torchrun)) == 2 else None,
                        60, "two ranks")  # fmt: skip
    d1.wait_for(lambda: len(d1.train(job)) >= 40, 90, "steps")

    # 1. kill -9: the job trains on, its output still flowing into its log files.
    _kill_daemon(d1)
    killed_at = time.time()
    out = Path(spec["run_dir"]) / "logs" / f"{job}.out"
    size = out.stat().st_size
    deadline = time.monotonic() + 30
    while out.stat().st_size <= size and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.stat().st_size > size, "the job stopped writing output when its agent died"
    assert all(process_alive(p) for p in [torchrun, *ranks])

    # 2. A new daemon adopts it: the same processes, watched again.
    d2 = AgentDaemon(state)
    daemons.append(d2)
    adopted = d2.wait_for(lambda: d2.event("job_adopted", lambda e: e["job"] == job), 30,
                          "the adoption")  # fmt: skip
    data = adopted["data"]
    assert data["ok"] and data["running"] and data["pid"] == torchrun
    assert data["attempt"] == 1 and data["previous_agent_pid"] == d1.proc.pid
    assert sorted(children(torchrun)) == sorted(ranks)
    (listed,) = d2.op("jobs")["jobs"]
    assert (listed["job"], listed["state"], listed["pid"]) == (job, "running", torchrun)
    d2.wait_for(lambda: len([t for t in d2.train(job) if t["ts"] > adopted["ts"]]) >= 40,
                60, "steps after the adoption")  # fmt: skip

    # Every rank's steps, across both agents and the time between: no gap, no repeat.
    records = d2.records()
    assert [r["seq"] for r in records] == list(range(records[0]["seq"],
                                                     records[-1]["seq"] + 1))
    for rank in (0, 1):
        steps = [t["step"] for t in d2.train(job) if t["rank"] == rank]
        assert steps == list(range(1, len(steps) + 1)), rank
    trained = [t for t in d2.train(job) if t["rank"] == 0]
    assert any(t["ts"] < killed_at for t in trained) and any(
        killed_at < t["ts"] < adopted["ts"] for t in trained)  # trained while unwatched
    # Its output is journaled again. The log files are read every half second, apart
    # from the spool the steps come through: the 40 steps above can be done by then.
    d2.wait_for(lambda: any("step" in r["line"] for r in d2.records("log")
                            if r["job"] == job and r["ts"] > adopted["ts"]),
                10, "the job's output after the adoption")  # fmt: skip

    # 3. Operations reach the adopted job: freeze (SIGSTOP the tree), then thaw.
    d2.op("pause", job=job, freeze=True, hold=30)
    d2.wait_for(lambda: d2.event("pause", lambda e: e["job"] == job
                                 and e["data"].get("mode") == "freeze"), 10, "the freeze")
    assert all(_proc_state(p) == "T" for p in [torchrun, *ranks])
    d2.op("thaw", job=job)
    d2.wait_for(lambda: d2.event("resume", lambda e: e["job"] == job
                                 and e["data"].get("mode") == "thaw"), 10, "the thaw")
    thawed = time.time()
    d2.wait_for(lambda: [t for t in d2.train(job) if t["ts"] > thawed], 30, "steps again")

    # 4. A rank crash is detected and recovered by the new agent.
    os.kill(ranks[1], signal.SIGKILL)
    crash = d2.wait_for(lambda: d2.event("interruption", lambda e: e["job"] == job), 30,
                        "the interruption")  # fmt: skip
    assert crash["data"]["cause"] == "killed" and crash["data"]["attempt"] == 1
    d2.wait_for(lambda: d2.event("recovery", lambda e: e["job"] == job), 60, "the recovery")
    second = d2.event("job_started", lambda e: e["job"] == job and e["data"]["attempt"] == 2)
    assert second is not None and second["data"]["reason"] == "recovery"

    # 5. A crash while no agent runs: the next agent learns how the attempt ended from
    # its wrapper's status file and recovers the job.
    torchrun2 = second["data"]["pid"]
    ranks2 = d2.wait_for(lambda: children(torchrun2) if len(children(torchrun2)) == 2
                         else None, 60, "two new ranks")  # fmt: skip
    d2.wait_for(lambda: [t for t in d2.train(job) if t["ts"] > second["ts"]], 60,
                "steps of attempt 2")  # fmt: skip
    _kill_daemon(d2)
    os.kill(ranks2[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while process_alive(torchrun2) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(torchrun2), "torchrun did not end after its rank was killed"
    d3 = AgentDaemon(state)
    daemons.append(d3)
    adopted = d3.wait_for(lambda: d3.event("job_adopted", lambda e: e["job"] == job
                                           and e["data"]["attempt"] == 2), 30,
                          "the second adoption")  # fmt: skip
    assert adopted["data"]["running"] is False and adopted["data"]["returncode"] not in (0, None)
    crash = d3.wait_for(lambda: d3.event("interruption", lambda e: e["job"] == job
                                         and e["data"]["attempt"] == 2), 30,
                        "the interruption found at adoption")  # fmt: skip
    assert crash["data"]["decision"]["retry"] is True
    assert crash["data"]["returncode"] == adopted["data"]["returncode"]
    recovered = d3.wait_for(lambda: d3.event("recovery", lambda e: e["job"] == job
                                             and e["data"]["restart_count"] == 2), 90,
                            "the recovery by the third agent")  # fmt: skip
    assert recovered["data"]["first_step"] == recovered["data"]["checkpoint_step"] + 1
    # Each failure counted and recovered once, whichever agent saw it.
    assert [e["data"]["restart_count"] for e in d3.events("recovery", job)] == [1, 2]
    assert [e["data"]["attempt"] for e in d3.events("interruption", job)] == [1, 2]

    # 6. A stop the agent acknowledged but was killed before carrying out: it is in the
    # job's saved state (the order of the two is tests/control/test_pending_ops_adoption.py),
    # and the next agent carries it out instead of letting the job train on.
    third = d3.event("job_started", lambda e: e["job"] == job and e["data"]["attempt"] == 3)
    assert third is not None
    torchrun3 = third["data"]["pid"]
    _kill_daemon(d3)
    saved_file = jobstate.path(state, job)
    saved = jobstate.read(saved_file)
    assert saved is not None and saved["state"] == "running" and saved["pending_ops"] == []
    jobstate.write(saved_file, dict(saved, pending_ops=[
        {"action": "stop", "args": {"grace": 10.0}, "at": time.time()}]))
    assert process_alive(torchrun3)
    d4 = AgentDaemon(state)
    daemons.append(d4)
    adopted = d4.wait_for(lambda: d4.event("job_adopted", lambda e: e["job"] == job
                                           and e["data"]["attempt"] == 3), 30,
                          "the third adoption")  # fmt: skip
    assert adopted["data"]["running"] is True and adopted["data"]["carried_over"] == ["stop"]
    exited = d4.wait_for(lambda: d4.event("job_exited", lambda e: e["job"] == job
                                          and e["data"]["pid"] == torchrun3), 30,
                         "the stop carried out")  # fmt: skip
    assert exited["data"]["ended_for"] == "stop"
    d4.wait_for(lambda: d4.op("jobs")["jobs"][0]["state"] == "stopped", 30, "stopped")
    assert not process_alive(torchrun3)
    assert d4.event("job_started", lambda e: e["job"] == job
                    and e["data"]["attempt"] == 4) is None  # stopped, not restarted
