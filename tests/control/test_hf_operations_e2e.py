"""A Hugging Face Trainer job (examples/hf_train.py, 2 ranks under torchrun on gloo)
steered through the agent: the LR scale shows in the next step, pause checkpoints a
`checkpoint-N/` folder the agent counts as valid, resume continues from its step, `c`
saves another, and a SIGKILLed rank is recovered from that one."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from agent.wire import checkpoints
from cockpit.control.jobspec import parse_jobspec

from .conftest import REPO, AgentDaemon, children, process_alive

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(420)]

NAME = "hf-ops"
MAX_STEPS, LR, EVERY = 5000, 1e-3, 10  # EVERY: the callback's agreement period, 2 ranks


def _spec(tmp_path: Path) -> dict:
    args = ["--max-steps", str(MAX_STEPS), "--lr", str(LR), "--logging-steps", "1",
            "--save-steps", "100000", "--eval-steps", "100000", "--batch-size", "4"]
    text = textwrap.dedent(f"""\
        name = "{NAME}"
        hosts = ["local"]
        nproc_per_node = 2
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(REPO / "examples" / "hf_train.py"))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp_path / "runs" / NAME))}
        stop_grace = 5
        pause_timeout = 120
        [env]
        PYTHONPATH = {json.dumps(str(REPO))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        HF_HUB_OFFLINE = "1"
        TRANSFORMERS_OFFLINE = "1"
    """)
    (tmp_path / "hf.toml").write_text(text)
    return parse_jobspec(text, str(tmp_path / "hf.toml")).for_host("local")


def _scheduled(step: int) -> float:
    """The LR the Trainer's linear schedule gives the optimizer step `step`."""
    return LR * (MAX_STEPS - (step - 1)) / MAX_STEPS


def test_hf_job_adjust_pause_resume_continues_from_the_checkpoint_step(
        tmp_path: Path, agent_daemon: AgentDaemon) -> None:
    d = agent_daemon
    d.op("launch", spec=_spec(tmp_path))
    started = d.wait_for(lambda: d.event("job_started", lambda e: e["job"] == NAME), 30,
                         "the start")
    d.wait_for(lambda: any(t["step"] >= 5 for t in d.train(NAME)), 180, "step 5")

    adjust = d.op("adjust", job=NAME, knobs={"lr_scale": 0.5})
    ack = d.wait_for(lambda: d.event("control_ack", lambda e: e["rank"] == 0 and e[
        "data"].get("id") == adjust["id"]), 60, "the trainer's ack")
    assert ack["msg"] == "applied lr_scale=0.5" and ack["data"]["ok"] is True
    first_scaled = ack["data"]["applied_step"]
    assert (first_scaled - 1) % EVERY == 0, ack  # agreed at a boundary, in force after it

    # `e`: the Trainer's own evaluation runs at the agreed step; its record, then the ack.
    ask_eval = d.op("adjust", job=NAME, knobs={"eval_now": True})
    evaluated = d.wait_for(lambda: d.event("control_ack", lambda e: e["rank"] == 0 and e[
        "data"].get("id") == ask_eval["id"]), 90, "the eval_now ack")
    assert evaluated["msg"] == "applied eval_now=True", evaluated
    evals = [r for r in d.records("eval") if r["job"] == NAME]
    assert [r["step"] for r in evals] == [evaluated["step"]] and evals[0]["loss"] > 0, evals

    ranks = children(started["data"]["pid"])
    d.op("pause", job=NAME)
    paused = d.wait_for(lambda: d.event("pause", lambda e: e["job"] == NAME), 150, "pause")
    assert paused["data"]["ok"] is True, paused
    step = paused["data"]["step"]
    folder = Path(paused["data"]["checkpoint"])
    assert folder.name == f"checkpoint-{step}" and step % EVERY == 0 and step >= first_scaled
    found, why = checkpoints.inspect(folder)
    assert why is None and found.kind == "dir" and found.step == step
    for pid in [started["data"]["pid"], *ranks]:
        d.wait_for(lambda pid=pid: not process_alive(pid), 20, f"pid {pid} to exit")
    assert not [e for e in d.events("checkpoint_skipped", NAME)], "a valid folder was skipped"

    d.op("resume", job=NAME)
    resume = d.wait_for(lambda: d.event("resume", lambda e: e["job"] == NAME), 30, "resume")
    assert resume["data"]["checkpoint"] == str(folder)
    d.wait_for(lambda: all(len([t for t in d.train(NAME) if t["ts"] > resume["ts"]
                                and t["rank"] == rank]) >= 3 for rank in (0, 1)), 180,
               "steps of both ranks after the resume")
    after = [t for t in d.train(NAME) if t["ts"] > resume["ts"]]
    for rank in (0, 1):
        steps = [t["step"] for t in after if t["rank"] == rank]
        assert steps[:3] == [step + 1, step + 2, step + 3], steps
    resumed = d.wait_for(lambda: d.event("resumed", lambda e: e["job"] == NAME), 30,
                         "the resumed event")
    assert resumed["step"] == step and resumed["data"]["path"] == str(folder)
    # Before the adjust the schedule's LR; from its step on, half of it, across the
    # pause too (the resumed process restored the operator's factor).
    for t in d.train(NAME):
        scale = 0.5 if t["step"] >= first_scaled else 1.0
        assert t["lr"] == pytest.approx(_scheduled(t["step"]) * scale), t

    # `c`, then a rank SIGKILLed: the agent recovers from that newer folder.
    ask = d.op("adjust", job=NAME, knobs={"checkpoint_now": True})
    done = d.wait_for(lambda: d.event("control_ack", lambda e: e["rank"] == 0 and e[
        "data"].get("id") == ask["id"]), 90, "the checkpoint_now ack")
    newer = done["step"]
    assert done["msg"] == "applied checkpoint_now=True" and newer > step
    assert checkpoints.inspect(folder.with_name(f"checkpoint-{newer}"))[1] is None
    second = d.event("job_started", lambda e: e["job"] == NAME and e["data"]["attempt"] == 2)
    os.kill(children(second["data"]["pid"])[1], signal.SIGKILL)
    recovered = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == NAME), 180,
                           "the recovery")
    assert recovered["data"]["checkpoint"] == str(folder.with_name(f"checkpoint-{newer}"))
    assert recovered["data"]["first_step"] == newer + 1
    assert [e["step"] for e in d.events("resumed", NAME)] == [step, newer]
    d.op("stop", job=NAME)
