"""examples/plain_train.py for real: two gloo ranks under torchrun obey the operator's
controls, acknowledge them only once done, and resume from the checkpoint the agent
would name (COCKPIT_RESUME_FROM) bit for bit."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.wire.checkpoints import inspect
from tests.harness.torchrun import ROOT, TrainerRun, spool_files

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

EXAMPLE = ROOT / "examples" / "plain_train.py"
STEPS, LR, WARMUP = 60, 3e-3, 20  # the example's --steps here, its --lr and --warmup defaults


def _schedule(step: int) -> float:
    """The LR the example's schedule gives step `step` (1-based): LambdaLR has been
    stepped step - 1 times by then."""
    k = step - 1
    if k < WARMUP:
        return LR * (k + 1) / WARMUP
    done = (k - WARMUP) / (STEPS - WARMUP)
    return LR * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, done))))


def _start(run_dir: Path, *extra: str, env: dict[str, str] | None = None,
           log: str = "trainer.log") -> TrainerRun:  # fmt: skip
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node=2", str(EXAMPLE), "--steps", str(STEPS), *extra]  # fmt: skip
    full = dict(os.environ, COCKPIT_RUN_DIR=str(run_dir), COCKPIT_JOB="plain",
                OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")  # fmt: skip
    full.pop("COCKPIT_RESUME_FROM", None)
    full.pop("COCKPIT_CHECKPOINT_DIR", None)
    full.update(env or {})
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=full, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    return TrainerRun(proc, run_dir, "plain", run_dir, run_dir / log, argv)


@pytest.fixture
def started():
    runs: list[TrainerRun] = []
    yield runs
    for run in runs:
        run.kill()


def test_controls_are_obeyed_acknowledged_and_survive_a_resume(tmp_path, started) -> None:
    run_dir = tmp_path / "run"
    run = _start(run_dir, "--sleep", "0.1", "--eval-every", "1000",
                 "--checkpoint-every", "1000")  # fmt: skip
    started.append(run)
    run.wait_for(lambda r: any(t["step"] >= 5 for t in r.records("train")), timeout=90)
    run.control_path.parent.mkdir(parents=True, exist_ok=True)
    with open(run.control_path, "a") as f:
        f.write(json.dumps({"id": "op-1", "ts": time.time(), "knobs": {
            "lr_scale": 0.5, "checkpoint_now": True, "eval_now": True}}) + "\n")
    assert run.wait(timeout=90) == 0, run.output()

    (ack,) = [e for e in run.records("event") if e["kind"] == "control_ack"]
    data = ack["data"]
    assert data["id"] == "op-1" and data["ok"] is True and not data.get("refused"), data
    assert set(data["knobs"]) == {"lr_scale", "checkpoint_now", "eval_now"}, data
    # Taken at a step S, which then trained with the scale, saved and evaluated.
    saved = [e["step"] for e in run.records("event") if e["kind"] == "checkpoint_saved"]
    assert len(saved) == 2 and saved[-1] == STEPS, saved
    agreed = saved[0]
    assert 5 < agreed < STEPS and data["applied_step"] == agreed, (data, saved)
    assert [e["step"] for e in run.records("eval")] == [agreed, STEPS]
    train = run.records("train")
    for rank in (0, 1):
        mine = [t for t in train if t["rank"] == rank]
        assert [t["step"] for t in mine] == list(range(1, STEPS + 1))
        for t in mine:
            scale = 0.5 if t["step"] >= agreed else 1.0
            assert t["lr"] == pytest.approx(_schedule(t["step"]) * scale), t
    checkpoint_path = run_dir / "checkpoints" / f"step-{agreed:08d}.pt"
    checkpoint, why = inspect(checkpoint_path)
    assert checkpoint is not None and checkpoint.step == agreed, why

    # As the agent restarts it: COCKPIT_RESUME_FROM names the checkpoint; the operator's
    # LR scale, kept by the Reporter, is in force from the first step.
    ended = time.time()
    again = _start(run_dir, env={"COCKPIT_RESUME_FROM": str(checkpoint_path)},
                   log="resume.log")  # fmt: skip
    started.append(again)
    assert again.wait(timeout=90) == 0, again.output()
    new = [r for h, recs in spool_files(run.spool_dir) if h["ts"] > ended for r in recs]
    resumed = [r for r in new if r["t"] == "event" and r["kind"] == "resumed"]
    assert [(e["step"], e["data"]["path"]) for e in resumed] == [(agreed, str(checkpoint_path))]
    before = {(t["rank"], t["step"]): (t["loss"], t["lr"]) for t in train}
    after = {(t["rank"], t["step"]): (t["loss"], t["lr"]) for t in new if t["t"] == "train"}
    assert sorted(after) == [(r, s) for r in (0, 1) for s in range(agreed + 1, STEPS + 1)]
    differ = {k: (v, before[k]) for k, v in after.items() if v != before[k]}
    assert not differ, f"(rank, step): ((loss, lr) resumed, (loss, lr) first run): {differ}"
