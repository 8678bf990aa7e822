"""A recording of a parent job and its fork, written through the real wire encoding and
ingest: what `cockpit compare` and the compare screen are tested on.

The parent trains steps 1-80 with one learning rate; at step 40 the agent forks it
with one override (`optim.lr`), and the fork trains steps 41-80 on two ranks beside
it, its loss falling faster. Both evaluate every 20 steps. The losses are functions of
the step (`parent_loss`, `fork_loss`) so a test derives what the screen must show
from them, not from figures typed in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.wire.protocol import encode
from cockpit.store.database import Store

T0 = 1_800_000_000.0
FORK_STEP = 40
LAST_STEP = 80
STEP_S = 0.5  # each step's time: 2 steps/s
SAMPLES = 16  # per step and rank
PARENT_LR, FORK_LR = 0.003, 0.001
CONFIG: dict[str, dict[str, Any]] = {"optim": {"lr": PARENT_LR, "warmup_steps": 30},
                                     "train": {"batch_size": 16}}
ENV = {"python": "3.11.7", "torch": "2.4.0", "cuda": "12.4", "packages_hash": "abc"}


def parent_loss(step: int) -> float:
    return 4.0 / (1 + 0.02 * step)


def fork_loss(step: int) -> float:
    return parent_loss(FORK_STEP) * (1 - 0.01 * (step - FORK_STEP))


def _steps(job: str, t0: float, first: int, last: int, loss: Any) -> list[tuple]:
    return [(t0 + (s - first) * STEP_S, "train", {
        "job": job, "rank": 0, "step": s, "loss": loss(s), "step_time": STEP_S,
        "data_time": 0.05, "samples": SAMPLES, "extra": {}}) for s in range(first, last + 1)]


def _evals(job: str, t0: float, first: int, last: int, loss: Any) -> list[tuple]:
    return [(t0 + (s - first) * STEP_S + 0.1, "eval", {"job": job, "rank": 0, "step": s,
                                                        "loss": loss(s) + 0.1})
            for s in range(first, last + 1) if s % 20 == 0]


def write_records(path: Path, records: list[tuple]) -> Path:
    """`records` ((ts, type, fields)) as one host's stream, ingested into `path`."""
    records = [(T0, "hello", {"agent_version": "t", "protocol": 1, "hostname": "h",
                              "driver": "550.54", "env": ENV,
                              "gpus": [{"index": 0}, {"index": 1}]}), *records]
    lines = [encode("stream", 0, {"protocol": 1, "agent_version": "t", "journal_id": "j",
                                  "from": 0, "first": 1, "head": len(records)}, ts=T0)]
    lines += [encode(t, seq, fields, ts=ts) for seq, (ts, t, fields)
              in enumerate(sorted(records, key=lambda r: r[0]), 1)]
    with Store(path) as store:
        assert not store.ingest("h", b"".join(lines)).malformed
    return path


def write_fork_and_parent(path: Path, parent: str = "parent", fork: str = "fork") -> Path:
    forked = {**CONFIG, "optim": {**CONFIG["optim"], "lr": FORK_LR}}
    fork_t0 = T0 + 5 + FORK_STEP * STEP_S + 1
    run: dict[str, Any] = {"rank": 0, "world_size": 1, "total_steps": LAST_STEP, "seed": 1337,
           "data_version": "dv-1", "git_commit": "c998e4c"}
    records = [
        (T0 + 1, "event", {"kind": "job_started", "job": parent, "data": {"reason": "launch"}}),
        (T0 + 2, "run", {**run, "job": parent, "config": CONFIG}),
        *_steps(parent, T0 + 5, 1, LAST_STEP, parent_loss),
        *_evals(parent, T0 + 5, 1, LAST_STEP, parent_loss),
        (fork_t0 - 0.5, "event", {"kind": "fork", "job": fork, "step": FORK_STEP, "data": {
            "ok": True, "parent": parent, "parent_step": FORK_STEP,
            "overrides": {"optim.lr": FORK_LR}}}),
        (fork_t0 - 0.4, "event", {"kind": "job_started", "job": fork,
                                  "data": {"reason": "fork"}}),
        (fork_t0 - 0.3, "run", {**run, "job": fork, "config": forked}),
        *_steps(fork, fork_t0, FORK_STEP + 1, LAST_STEP, fork_loss),
        *_evals(fork, fork_t0, FORK_STEP + 1, LAST_STEP, fork_loss),
    ]
    return write_records(path, records)
