"""What the recorded real run holds, read straight from its NDJSON journal.

Tests compare the screen with these facts instead of with figures typed into the test:
they come from the raw records, not through the store and snapshot code under test, so
a wrong query or a wrong pane shows up as a mismatch.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache

from tests.harness.recording import RECORDED_HOST, RECORDING


@dataclass(frozen=True)
class RecordingFacts:
    host: str
    job: str
    first_ts: float
    last_ts: float
    last_step: int
    total_steps: int
    world_size: int
    gpu_count: int
    simulated: bool
    final_losses: frozenset[float]  # every rank's train loss at the last step
    eval_points: tuple[tuple[int, float], ...]  # (step, validation loss), in order
    checkpoint_steps: tuple[int, ...]
    log_lines: tuple[str, ...]  # every trainer output line (blank ones too), in order
    train_times: tuple[tuple[float, int], ...]  # (ts, step) of every train record
    job_started_ts: float | None  # its first launch
    restarted_ts: float | None  # its newest start (the recovery's), when it started again
    exit_code: int | None  # of the job's last attempt, when the recording saw it exit
    adjust: tuple[int, str] | None  # (step, "knob=value") of the operator's change
    resumed_step: int | None  # the checkpoint step the job restarted from
    interruption: dict | None  # the interruption event: why the job died, and when
    seed: int
    tags: tuple[str, ...]
    config: dict  # the trainer's whole config, as its run record declared it

    def step_at(self, ts: float) -> int | None:
        """The newest step a replay at `ts` may show (records after `ts` are unseen)."""
        seen = [(t, step) for t, step in self.train_times if t <= ts]
        return max(seen)[1] if seen else None

    @property
    def mid_run(self) -> float:
        """The replay position (0 start, 1 end) halfway through training: the recording
        goes on for a while after the job's end."""
        first, last = self.train_times[0][0], self.train_times[-1][0]
        return ((first + last) / 2 - self.first_ts) / (self.last_ts - self.first_ts)

    @property
    def best_eval(self) -> tuple[int, float]:
        return min(self.eval_points, key=lambda point: point[1])


@cache
def recording_facts() -> RecordingFacts:
    with gzip.open(RECORDING, "rt", encoding="utf-8") as journal:
        records = [json.loads(line) for line in journal]
    by_type: dict[str, list[dict]] = {}
    for record in records:
        by_type.setdefault(record["t"], []).append(record)
    train = by_type["train"]
    last_step = max(r["step"] for r in train)
    (hello,) = by_type["hello"]
    run = by_type["run"][0]  # each attempt declares the run; the first started it

    def events(kind: str) -> list[dict]:
        return [r for r in by_type["event"] if r["kind"] == kind]

    return RecordingFacts(
        host=RECORDED_HOST,
        job=train[-1]["job"],
        first_ts=min(r["ts"] for r in records),
        last_ts=max(r["ts"] for r in records),
        last_step=last_step,
        total_steps=run["total_steps"],
        world_size=run["world_size"],
        gpu_count=len(hello["gpus"]),
        simulated=all(gpu.get("simulated") for gpu in hello["gpus"]),
        final_losses=frozenset(r["loss"] for r in train if r["step"] == last_step),
        eval_points=tuple((r["step"], r["loss"]) for r in by_type["eval"]),
        checkpoint_steps=tuple(r["step"] for r in by_type["event"]
                               if r["kind"] == "checkpoint_saved"),
        log_lines=tuple(r["line"] for r in by_type["log"]),
        train_times=tuple((r["ts"], r["step"]) for r in train),
        job_started_ts=next((r["ts"] for r in by_type["event"] if r["kind"] == "job_started"),
                            None),
        restarted_ts=([r["ts"] for r in events("job_started")][1:] or [None])[-1],
        exit_code=([r["data"]["returncode"] for r in events("job_exited")] or [None])[-1],
        adjust=next(((r["step"], r["msg"].removeprefix("applied "))
                     for r in events("control_ack") if r["rank"] is not None), None),
        resumed_step=next((r["step"] for r in events("resumed")), None),
        interruption=next(iter(events("interruption")), None),
        seed=run["config"]["seed"],
        tags=tuple(run.get("tags") or ()),
        config=run["config"],
    )
