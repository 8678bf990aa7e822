"""The Lightning example as an operator runs it: launched by the agent daemon under
torchrun (2 ranks, gloo), adjusted (`lr_scale`, then `c` and `e`), paused and resumed
through the daemon's control ops, then recovered by the agent after a rank is killed.

The pause is the agent's own: it asks for `checkpoint_now`, waits for a checkpoint the
callback saved and marked complete, and stops the job; the resume starts it again with
`COCKPIT_RESUME_FROM`, which the example passes to `trainer.fit(ckpt_path=...)`.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path

import pytest

from agent.journal.control_inbox import append_op
from agent.wire import checkpoints
from tests.agent.conftest import REPO, Proc
from tests.harness.journal_tail import JournalTail
from tests.harness.torchrun import read_spool, spool_files
from tests.harness.waiting import wait_for

pytest.importorskip("lightning")

JOB = "pl"


_TAILS: dict[Path, JournalTail] = {}  # one per state dir: the polls read each record once


def _journal(state: Path) -> list[dict]:
    return _TAILS.setdefault(state, JournalTail(state)).records()


def _events(state: Path, kind: str) -> list[dict]:
    return [r for r in _journal(state) if r["t"] == "event" and r["kind"] == kind
            and r.get("job") == JOB]  # fmt: skip


def _op(state: Path, op: str, timeout: float = 60, **args: object) -> dict:
    """One control op through the daemon's inbox; its ack's data."""
    op_id = secrets.token_hex(6)
    append_op(state, {"op": op, "id": op_id, "_rx": time.time(), **args})
    return wait_for(lambda: next((r["data"] for r in _events(state, "control_ack")
                                  if r["data"].get("id") == op_id), None), timeout,
                    f"ack of {op}")  # fmt: skip


def _lr(step: int) -> float:  # the example's schedule: 0.05, halved every 50 steps
    return 0.05 * 0.5 ** ((step - 1) // 50)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lightning_example_adjusted_paused_and_resumed_by_the_agent(tmp_path: Path) -> None:
    state, run_dir = tmp_path / "state", tmp_path / "runs" / JOB
    spool = run_dir / "spool" / JOB
    daemon = Proc("run", "--state-dir", str(state), "--stop-grace", "5")
    try:
        spec = {"name": JOB, "python": sys.executable,
                "script": str(REPO / "examples" / "lightning_train.py"),
                "args": ["--max-steps", "100000", "--save-every", "100000",
                         "--val-every", "100000"],
                "nproc_per_node": 2, "run_dir": str(run_dir), "stop_grace": 10,
                "env": {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}}  # fmt: skip
        assert _op(state, "launch", spec=spec)["ok"]
        wait_for(lambda: {r["rank"] for r in read_spool(spool, "train") if r["step"] >= 3}
                 == {0, 1}, 180, "steps on both ranks")
        assert _op(state, "adjust", job=JOB, knobs={"lr_scale": 0.5})["ok"]
        applied = wait_for(lambda: [e for e in read_spool(spool, "event")
                                    if e["kind"] == "control_ack" and e["data"]["ok"]
                                    and e["data"].get("knobs") == {"lr_scale": 0.5}],
                           60, "the trainer's ack of lr_scale")[0]
        # `c` and `e`: a checkpoint the agent counts valid, and an evaluation, both at the
        # step the ranks agreed on.
        assert _op(state, "adjust", job=JOB, knobs={"checkpoint_now": True,
                                                    "eval_now": True})["ok"]
        done = wait_for(lambda: [e for e in read_spool(spool, "event")
                                 if e["kind"] == "control_ack" and e["data"]["ok"]
                                 and "eval_now" in e["data"].get("knobs", {})],
                        60, "the trainer's ack of checkpoint_now and eval_now")[0]
        assert done["data"]["knobs"] == {"checkpoint_now": True, "eval_now": True}
        (saved,) = [e for e in read_spool(spool, "event") if e["kind"] == "checkpoint_saved"]
        (evaluation,) = read_spool(spool, "eval")
        assert evaluation["step"] == saved["step"] and evaluation["loss"] >= 0
        asked, why = checkpoints.at_step(run_dir / "checkpoints", saved["step"])
        assert asked is not None and str(asked.path) == saved["data"]["path"], why
        assert _op(state, "pause", job=JOB, timeout=120)["ok"]
        (paused,) = wait_for(lambda: _events(state, "pause"), 120, "the pause")
        assert paused["data"]["ok"] is True, paused
        at = paused["data"]["step"]
        found, why = checkpoints.at_step(run_dir / "checkpoints", at)
        assert found is not None and str(found.path) == paused["data"]["checkpoint"], why

        assert _op(state, "resume", job=JOB)["ok"]
        (resumed,) = wait_for(lambda: [e for e in read_spool(spool, "event")
                                       if e["kind"] == "resumed"], 180, "resumed")
        assert resumed["step"] == at and resumed["data"]["path"] == str(found.path)
        wait_for(lambda: {r["rank"] for r in read_spool(spool, "train")
                          if r["ts"] > resumed["ts"] and r["step"] >= at + 3} == {0, 1},
                 120, "steps after the resume on both ranks")
        # A rank dies (the OOM killer, a lost GPU): the agent restarts the job from the
        # newest valid checkpoint, the pause's, and the trainer says so.
        (victim,) = [h["pid"] for h, _records in spool_files(spool)[::-1]
                     if h["rank"] == 1][:1]
        os.kill(victim, signal.SIGKILL)
        recovered = wait_for(lambda: [e for e in _events(state, "resumed")
                                      if e["ts"] > resumed["ts"]], 240, "the recovery")[0]
        assert recovered["step"] == at and recovered["data"]["path"] == str(found.path)
        wait_for(lambda: {r["rank"] for r in read_spool(spool, "train")
                          if r["ts"] > recovered["ts"] and r["step"] >= at + 2} == {0, 1},
                 120, "steps after the recovery on both ranks")
        assert _op(state, "stop", job=JOB, grace=5)["ok"]
    finally:
        daemon.close()
    # The spool of a stopped attempt is gone once journaled: the journal has both.
    train = [r for r in _journal(state) if r["t"] == "train" and r.get("job") == JOB]
    for since in (resumed["ts"], recovered["ts"]):
        after = [r for r in train if r["ts"] > since]
        for rank in (0, 1):
            steps = [r["step"] for r in after if r["rank"] == rank]
            assert steps[:2] == [at + 1, at + 2]  # from the checkpoint's step, not 0
            # The operator's scale, set before the pause, is still in force after it.
            assert [r["lr"] for r in after if r["rank"] == rank][:2] == pytest.approx(
                [0.5 * _lr(s) for s in steps[:2]])
    # Before the pause: the scale from the step its ack names, on both ranks.
    start = applied["data"]["applied_step"]
    for rank in (0, 1):
        mine = {r["step"]: r["lr"] for r in train if r["rank"] == rank
                and r["ts"] < resumed["ts"]}  # fmt: skip
        assert mine[start] == pytest.approx(0.5 * _lr(start))
        assert mine[start - 1] == pytest.approx(_lr(start - 1))
