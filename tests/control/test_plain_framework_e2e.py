"""The plain PyTorch loop (examples/plain_train.py, 2 ranks under torchrun on gloo)
steered through the agent, as the HF and Lightning jobs are: the LR scale shows in the
journaled LR series from the step its ack names, `e` makes an eval record, pause
checkpoints a file the agent counts valid and resume continues from its step with the
`resumed` event (the cockpit's ↻), `c` saves another, and a SIGKILLed rank is recovered
from that newest valid checkpoint."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from agent.wire import checkpoints
from cockpit.control.jobspec import parse_jobspec

from .conftest import REPO, AgentDaemon, children, process_alive

pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(420)]

NAME = "plain-ops"
STEPS, LR, WARMUP = 100000, 3e-3, 20  # the example's --steps here, its --lr and --warmup


def _spec(tmp_path: Path) -> dict:
    args = ["--steps", str(STEPS), "--sleep", "0.05", "--eval-every", "1000000",
            "--checkpoint-every", "1000000"]  # fmt: skip
    text = textwrap.dedent(f"""\
        name = "{NAME}"
        hosts = ["local"]
        nproc_per_node = 2
        python = {json.dumps(sys.executable)}
        script = {json.dumps(str(REPO / "examples" / "plain_train.py"))}
        args = {json.dumps(args)}
        run_dir = {json.dumps(str(tmp_path / "runs" / NAME))}
        stop_grace = 5
        pause_timeout = 120
        [env]
        PYTHONPATH = {json.dumps(str(REPO))}
        OMP_NUM_THREADS = "1"
        GLOO_SOCKET_IFNAME = "lo"
        [recovery]
        backoff = 0.2
    """)
    (tmp_path / "plain.toml").write_text(text)
    return parse_jobspec(text, str(tmp_path / "plain.toml")).for_host("local")


def _scheduled(step: int) -> float:
    """The LR the example's schedule gives step `step` (LambdaLR stepped step - 1 times)."""
    k = step - 1
    if k < WARMUP:
        return LR * (k + 1) / WARMUP
    done = (k - WARMUP) / (STEPS - WARMUP)
    return LR * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done))))


def _ack(d: AgentDaemon, op: dict, what: str) -> dict:
    """The trainer's (rank 0's) acknowledgement of the adjust `op`."""
    return d.wait_for(lambda: d.event("control_ack", lambda e: e["rank"] == 0 and e[
        "data"].get("id") == op["id"]), 90, what)


def test_plain_job_obeys_every_control_and_is_recovered_from_the_newest_checkpoint(
        tmp_path: Path, agent_daemon: AgentDaemon) -> None:
    d = agent_daemon
    d.op("launch", spec=_spec(tmp_path))
    started = d.wait_for(lambda: d.event("job_started", lambda e: e["job"] == NAME), 30,
                         "the start")
    d.wait_for(lambda: any(t["step"] >= 5 for t in d.train(NAME)), 180, "step 5")

    # The LR scale: in the journaled LR of both ranks from the step the ack names.
    ack = _ack(d, d.op("adjust", job=NAME, knobs={"lr_scale": 0.5}), "the lr_scale ack")
    assert ack["msg"] == "applied lr_scale=0.5" and ack["data"]["ok"] is True, ack
    first_scaled = ack["data"]["applied_step"]
    d.wait_for(lambda: {t["rank"] for t in d.train(NAME) if t["step"] > first_scaled}
               == {0, 1}, 60, "steps after the scale on both ranks")
    for rank in (0, 1):
        mine = {t["step"]: t["lr"] for t in d.train(NAME) if t["rank"] == rank}
        assert mine[first_scaled - 1] == pytest.approx(_scheduled(first_scaled - 1))
        assert mine[first_scaled] == pytest.approx(0.5 * _scheduled(first_scaled))

    # `e`: an eval record at the step the ranks agreed on, then the ack.
    evaluated = _ack(d, d.op("adjust", job=NAME, knobs={"eval_now": True}), "the eval ack")
    assert evaluated["msg"] == "applied eval_now=True", evaluated
    assert [r["step"] for r in d.records("eval") if r["job"] == NAME] == [evaluated["step"]]

    # Pause: a checkpoint the agent counts valid, then no process; resume from it.
    ranks = children(started["data"]["pid"])
    d.op("pause", job=NAME)
    paused = d.wait_for(lambda: d.event("pause", lambda e: e["job"] == NAME), 150, "pause")
    assert paused["data"]["ok"] is True, paused
    step = paused["data"]["step"]
    path = Path(paused["data"]["checkpoint"])
    found, why = checkpoints.inspect(path)
    assert why is None and found is not None and found.step == step > first_scaled
    for pid in [started["data"]["pid"], *ranks]:
        d.wait_for(lambda pid=pid: not process_alive(pid), 20, f"pid {pid} to exit")
    assert not d.events("checkpoint_skipped", NAME), "a valid checkpoint was skipped"

    d.op("resume", job=NAME)
    resume = d.wait_for(lambda: d.event("resume", lambda e: e["job"] == NAME), 30, "resume")
    assert resume["data"]["checkpoint"] == str(path)
    d.wait_for(lambda: all(len([t for t in d.train(NAME) if t["ts"] > resume["ts"]
                                and t["rank"] == rank]) >= 3 for rank in (0, 1)), 180,
               "steps of both ranks after the resume")
    after = [t for t in d.train(NAME) if t["ts"] > resume["ts"]]
    for rank in (0, 1):
        assert [t["step"] for t in after if t["rank"] == rank][:3] == [step + 1, step + 2,
                                                                      step + 3]
    resumed = d.wait_for(lambda: d.event("resumed", lambda e: e["job"] == NAME), 30,
                         "the resumed event")
    assert resumed["step"] == step and resumed["data"]["path"] == str(path)

    # `c`, then a rank SIGKILLed: the agent restarts from that newer checkpoint.
    done = _ack(d, d.op("adjust", job=NAME, knobs={"checkpoint_now": True}),
                "the checkpoint_now ack")
    newer = done["step"]
    assert done["msg"] == "applied checkpoint_now=True" and newer > step, done
    run_dir = tmp_path / "runs" / NAME
    newest, skipped = checkpoints.newest_valid(run_dir / "checkpoints")
    assert newest is not None and newest.step == newer, skipped
    second = d.event("job_started", lambda e: e["job"] == NAME and e["data"]["attempt"] == 2)
    os.kill(children(second["data"]["pid"])[1], signal.SIGKILL)
    recovered = d.wait_for(lambda: d.event("recovery", lambda e: e["job"] == NAME), 180,
                           "the recovery")
    assert recovered["data"]["checkpoint"] == str(newest.path)
    assert recovered["data"]["first_step"] == newer + 1
    assert [e["step"] for e in d.events("resumed", NAME)] == [step, newer]
    # The operator's scale held through the pause and the recovery.
    for t in d.train(NAME):
        scale = 0.5 if t["step"] >= first_scaled else 1.0
        assert t["lr"] == pytest.approx(_scheduled(t["step"]) * scale), t
    d.op("stop", job=NAME)
