"""Autonomous recovery for real: the agent daemon supervises a 2-rank torchrun job of the
example trainer; a SIGKILLed rank and a SIGSTOPped (hung) rank are each detected,
classified, journaled and recovered from the newest valid checkpoint, with no cockpit."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from agent.wire import checkpoints

from .conftest import AgentDaemon, charlm_spec, children, process_alive

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(150)]

HANG = """
[hang]
k = 3.0
floor = 3.0
startup = 120.0
"""


def _ranks(daemon: AgentDaemon, job: str, attempt: int) -> list[int]:
    started = daemon.wait_for(lambda: daemon.event(
        "job_started", lambda e: e["job"] == job and e["data"]["attempt"] == attempt),
        30, f"attempt {attempt}")  # fmt: skip
    return daemon.wait_for(lambda: children(started["data"]["pid"]) if len(
        children(started["data"]["pid"])) == 2 else None, 30, "two ranks")


def _steps_after(daemon: AgentDaemon, job: str, ts: float) -> list[int]:
    return [t["step"] for t in daemon.train(job) if t["ts"] > ts]


def test_killed_rank_and_hung_rank_are_recovered_from_newest_valid_checkpoint(
    tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path
) -> None:
    d, job = agent_daemon, "rec"
    # Every checkpoint is kept: the relaunched attempt saves one each 10 steps, and with
    # the default 3 kept, the one it resumed from can be pruned before it is inspected.
    spec = charlm_spec(tmp_path, charlm_shards, job, extra=HANG, sets=("checkpoint.keep=1000",))
    ckpt_dir = Path(spec["run_dir"]) / "checkpoints"
    d.op("launch", spec=spec)
    ranks = _ranks(d, job, 1)
    d.wait_for(lambda: [e for e in d.events("checkpoint_saved", job) if e["step"] >= 20],
               90, "two checkpoints")  # fmt: skip

    # 1. A crash: one rank is SIGKILLed (as the host's OOM killer would).
    killed_at = time.time()
    os.kill(ranks[1], signal.SIGKILL)
    crash = d.wait_for(lambda: d.event("interruption", lambda e: e["job"] == job), 30,
                       "the interruption")  # fmt: skip
    data = crash["data"]
    assert data["cause"] == "killed", data
    # The rank that was killed leads the account, not a peer torchrun's teardown ended.
    assert f"(pid {ranks[1]}) killed by SIGKILL" in data["evidence"][0], data
    assert f"(pid {ranks[1]}) killed by SIGKILL" in crash["msg"], crash
    assert data["detected_at"] >= killed_at and data["detection_latency"] >= 0
    assert data["decision"]["retry"] is True
    recovered = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == job), 60,
                           "the recovery")  # fmt: skip
    rec = recovered["data"]
    newest, _ = checkpoints.newest_valid(ckpt_dir)
    assert rec["checkpoint"] is not None and Path(rec["checkpoint"]).parent == ckpt_dir
    used = checkpoints.inspect(Path(rec["checkpoint"]))[0]
    assert used is not None and used.step == rec["checkpoint_step"]
    assert used.step >= 20 and newest.step >= used.step
    second_start = d.event("job_started", lambda e: e["job"] == job
                           and e["data"]["attempt"] == 2)  # fmt: skip
    trained_before = max(t["step"] for t in d.train(job) if t["ts"] < second_start["ts"])
    # The ranks' last records before the kill can die with them, unjournaled: the
    # checkpoint may then be newer than any step the store saw, and nothing was lost.
    assert rec["steps_lost"] == max(0, trained_before - used.step)
    assert rec["restart_count"] == 1 and rec["cause"] == "killed"
    assert rec["first_step"] == used.step + 1
    assert rec["recovery_seconds"] > 0
    resumed = [e for e in d.events("resumed", job) if e["rank"] == 0]
    assert resumed and resumed[-1]["step"] == used.step

    # 2. A hang: one rank stops (SIGSTOP); its peer waits in the collective forever.
    ranks = _ranks(d, job, 2)
    d.wait_for(lambda: len(_steps_after(d, job, recovered["ts"])) >= 10, 60, "new steps")
    stopped_at = time.time()
    os.kill(ranks[0], signal.SIGSTOP)
    hang = d.wait_for(lambda: d.event("interruption", lambda e: e["job"] == job
                                      and e["data"]["cause"] == "hang"), 60, "the hang")
    data = hang["data"]
    assert data["detected_at"] > stopped_at
    assert data["silent_for"] >= data["threshold"] >= 3.0
    assert data["detection_latency"] == pytest.approx(data["silent_for"], abs=0.5)
    stacks = data["stacks"]
    if stacks["method"] is None:  # no py-spy here and charlm registers no faulthandler
        assert "0" in stacks["unavailable"] and set(stacks["unavailable"]) <= {"0", "1"}
        assert any("stacks of rank 0 unavailable" in line for line in data["evidence"])
    else:
        assert Path(stacks["file"]).read_text()
    second = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == job
                                        and e["data"]["restart_count"] == 2), 60,
                        "the second recovery")  # fmt: skip
    assert second["data"]["cause"] == "hang"
    assert second["data"]["first_step"] == second["data"]["checkpoint_step"] + 1
    for pid in ranks:  # the hung attempt is gone, stopped rank included
        d.wait_for(lambda pid=pid: not process_alive(pid), 10, f"pid {pid} gone")
    d.op("stop", job=job)
