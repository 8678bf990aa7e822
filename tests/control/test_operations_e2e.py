"""Operator operations through the agent for real: adjust the LR, pause (no job process
left), resume from the paused step -- under a job name full of shell metacharacters --,
and fork with another LR beside the running job."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.charlm.config import load_config
from examples.charlm.train import lr_at

from .conftest import FAST, REPO, AgentDaemon, charlm_spec, children, process_alive

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(150)]

NAME = "ops; touch PWNED $(touch PWNED)"


def test_adjust_pause_resume_continues_from_the_paused_step(
    tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path
) -> None:
    d = agent_daemon
    spec = charlm_spec(tmp_path, charlm_shards, NAME)
    cfg = load_config(None, [*FAST, "train.max_steps=2000"])
    d.op("launch", spec=spec)
    started = d.wait_for(lambda: d.event("job_started", lambda e: e["job"] == NAME), 30,
                         "the start")  # fmt: skip
    d.wait_for(lambda: any(t["step"] >= 8 for t in d.train(NAME)), 90, "step 8")

    # Adjust: halve the LR without a restart; the trainer acknowledges it.
    d.op("adjust", job=NAME, knobs={"lr_scale": 0.5})
    applied = d.wait_for(lambda: d.event("control_ack", lambda e: e["job"] == NAME
                                         and e["rank"] == 0), 30, "the trainer's ack")
    # The ack names the first step trained with it, the one after the ranks agreed.
    agreed = applied["data"]["applied_step"] - 1
    assert agreed % cfg["control"]["every"] == 0, applied

    # Pause: checkpoint at an agreed step, then every job process exits.
    ranks = children(started["data"]["pid"])
    d.op("pause", job=NAME)
    paused = d.wait_for(lambda: d.event("pause", lambda e: e["job"] == NAME), 60, "pause")
    assert paused["data"]["ok"] is True and paused["data"]["mode"] == "checkpoint"
    step = paused["data"]["step"]
    assert step % cfg["control"]["every"] == 0 and step > agreed
    assert Path(paused["data"]["checkpoint"]).name == f"ckpt-{step:08d}.pt"
    for pid in [started["data"]["pid"], *ranks]:
        d.wait_for(lambda pid=pid: not process_alive(pid), 10, f"pid {pid} to exit")
    trained = max(t["step"] for t in d.train(NAME))
    assert paused["data"]["steps_discarded"] == trained - step
    exits = d.events("job_exited", NAME)
    assert exits and exits[-1]["data"]["ended_for"] == "pause"  # asked for, not a crash
    assert "(ended by the agent for a pause)" in exits[-1]["msg"]
    # The job's log says the shutdown output is the pause's, before torchrun prints it.
    logs = [r["line"] for r in d.records("log") if r.get("job") == NAME]
    note = next(i for i, line in enumerate(logs)
                if line.startswith("[cockpit-agent] stopping the job for a pause: SIGTERM"))
    assert not any("SignalException" in line for line in logs[:note]), logs[:note]

    # Adjust while paused (as in `cockpit demo`): no process reads it now, so the agent
    # says when it applies rather than "done"; the same scale keeps the LR checks below.
    stored = d.op("adjust", job=NAME, knobs={"lr_scale": 0.5})
    assert stored["applies_at"] == "resume", stored
    said = d.event("control_ack", lambda e: e["data"]["id"] == stored["id"])
    assert said["msg"] == ("control op adjust (lr_scale=0.5) stored: applies when the job "
                          "resumes")

    # Resume: from the paused step's checkpoint, keeping the operator's LR scale.
    d.op("resume", job=NAME)  # accepted: the job's thread carries it out after the ack
    resume = d.wait_for(lambda: d.event("resume", lambda e: e["job"] == NAME), 30, "resume")
    assert resume["data"]["checkpoint"] == paused["data"]["checkpoint"]
    d.wait_for(lambda: all(len([t for t in d.train(NAME) if t["ts"] > resume["ts"]
                                and t["rank"] == rank]) >= 3 for rank in (0, 1)), 90,
               "steps of both ranks after the resume")  # fmt: skip
    # The resumed trainer acknowledges the adjust made while paused at its first step
    # (a chart marker, the knob the cockpit shows in force), and only that one: the
    # adjust acknowledged before the pause is restored without a second marker.
    announced = d.wait_for(lambda: [(e["data"]["id"], e["step"], e["msg"])
                                    for e in d.events("control_ack", NAME)
                                    if e["rank"] == 0 and e["ts"] > resume["ts"]], 30,
                           "the resumed trainer's ack")  # fmt: skip
    assert announced == [(stored["id"], step + 1,
                          "applied lr_scale=0.5 (set while the job was not running)")]
    after = [t for t in d.train(NAME) if t["ts"] > resume["ts"]]
    for rank in (0, 1):
        steps = [t["step"] for t in after if t["rank"] == rank]
        assert steps[: 3] == [step + 1, step + 2, step + 3], steps
    # Every recorded lr is the schedule's, unscaled up to one switch step and halved after
    # it; the switch is the same for both ranks and lies at the agreement boundary the
    # trainer computes from when rank 0 read the request (the ack's step and the boundary
    # may differ by a control period or two under load).
    # One reading of the records for every check below: the job trains on, and a second
    # reading would hold steps the first one's switch sets never saw.
    trained_records = d.train(NAME)
    switch: dict[int, set[int]] = {0: set(), 1: set()}
    for t in trained_records:
        base = lr_at(t["step"], cfg)
        if t["lr"] == pytest.approx(base * 0.5) and base > 0:
            switch[t["rank"]].add(t["step"])
        else:
            assert t["lr"] == pytest.approx(base), t
    firsts = {rank: min(steps) for rank, steps in switch.items() if steps}
    assert set(firsts) == {0, 1}, switch
    assert firsts[0] == firsts[1], firsts
    every = cfg["control"]["every"]
    switched_after = firsts[0] - 1
    assert switched_after % every == 0, (firsts, every)  # an agreement boundary
    assert abs(switched_after - agreed) <= 2 * every, (firsts, agreed)
    for rank, steps in switch.items():
        later = [t["step"] for t in trained_records if t["rank"] == rank
                 and t["step"] >= firsts[rank]]
        assert set(later) <= steps, f"rank {rank} fell back to the unscaled lr"

    d.op("stop", job=NAME)
    assert not (REPO / "PWNED").exists() and not (tmp_path / "PWNED").exists()


def test_fork_starts_from_the_parents_checkpoint_with_overrides_beside_it(
    tmp_path: Path, agent_daemon: AgentDaemon, charlm_shards: Path
) -> None:
    d, parent = agent_daemon, "parent"
    # One rank: the fork's claims are about its checkpoint, overrides and steps, and a
    # second rank in each of the two jobs would double their start-up and steps.
    d.op("launch", spec=charlm_spec(tmp_path, charlm_shards, parent, ranks=1))
    d.wait_for(lambda: d.events("checkpoint_saved", parent), 90, "a checkpoint")
    fork = "parent-fork"
    data = d.op("fork", job=parent, name=fork,
                overrides={"optim.lr": 0.001, "train.max_steps": 300})  # fmt: skip
    forked = d.wait_for(lambda: d.event("fork", lambda e: e["job"] == fork), 30, "the fork")
    assert forked["data"]["ok"] is True
    parent_step = forked["data"]["parent_step"]
    assert data["parent"] == parent and forked["data"]["parent"] == parent
    assert forked["data"]["overrides"] == {"optim.lr": 0.001, "train.max_steps": 300}
    copied = Path(forked["data"]["checkpoint"])
    assert copied.parent == Path(data["run_dir"]) / "checkpoints"
    assert copied.read_bytes() == Path(forked["data"]["source"]).read_bytes()
    started = d.wait_for(lambda: d.event("job_started", lambda e: e["job"] == fork), 30,
                         "the fork's start")  # fmt: skip
    assert started["data"]["checkpoint"] == str(copied)
    # Past the LR warm-up (30 steps), where the schedule depends on the overridden
    # train.max_steps, so the check below covers both overrides.
    d.wait_for(lambda: len([t for t in d.train(fork) if t["rank"] == 0]) >= 3
               and max(t["step"] for t in d.train(fork)) >= 40, 120,
               "the fork's steps past the warm-up")  # fmt: skip
    fork_cfg = load_config(None, [*FAST, "train.max_steps=300", "optim.lr=0.001"])
    fork_steps = sorted(t["step"] for t in d.train(fork) if t["rank"] == 0)
    assert fork_steps[:3] == [parent_step + 1, parent_step + 2, parent_step + 3]
    for t in d.train(fork):
        assert t["lr"] == pytest.approx(lr_at(t["step"], fork_cfg)), t
    assert any(t["ts"] > started["ts"] for t in d.train(parent)), "the parent kept training"
    d.op("stop", job=fork)
    d.op("stop", job=parent)
