"""After a change of world size the ETA and the speed are the new world's: the recent
steps timed before it are scaled by how much each rank's share of a step changed
(`analysis.eta.rescaled_steps`), measured from the samples the ranks report.

The recording: 4 ranks, 16 samples each a step (a global batch of 64), 1 s a step, steps
1..100; the job is rescaled to 2 ranks and goes on from step 101. A trainer that keeps
its global batch gives each of the 2 ranks 32 samples, and a step takes 2 s; one that
keeps its per-rank batch (the example trainer) gives each 16, and a step takes 1 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.eta import rescaled_steps
from cockpit.analysis.ranks import StepSample
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0

TOTAL = 1000
OLD_STEPS = 100
NEW_STEPS = 4
SINCE = TS0 + OLD_STEPS + 30  # the new world's run record: 30 s after the last old step


def _steps(first: int, last: int, ranks: int, samples: int, step_time: float,
           ts_of, seq: int) -> bytes:
    out = b""
    for step in range(first, last + 1):
        for rank in range(ranks):
            out += encode("train", seq, {"job": "j1", "rank": rank, "step": step,
                                         "loss": 1.0, "step_time": step_time,
                                         "samples": samples}, ts=ts_of(step) + rank * 0.01)
            seq += 1
    return out


def _recording(path: Path, new_samples: int, new_step_time: float) -> Path:
    with Store(path) as store:
        store.ingest("h1", encode("run", 1, {"job": "j1", "rank": 0, "world_size": 4,
                                             "total_steps": TOTAL}, ts=TS0))
        store.ingest("h1", _steps(1, OLD_STEPS, 4, 16, 1.0, lambda s: TS0 + s, 10))
        store.ingest("h1", encode("run", 5000, {"job": "j1", "rank": 0, "world_size": 2},
                                  ts=SINCE))
        store.ingest("h1", _steps(OLD_STEPS + 1, OLD_STEPS + NEW_STEPS, 2, new_samples,
                                  new_step_time,
                                  lambda s: SINCE + (s - OLD_STEPS) * new_step_time, 5001))
    return path


def _progress(path: Path):
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=None, label="REPLAY").progress


def test_a_kept_global_batch_doubles_the_step_after_a_scale_down(tmp_path: Path) -> None:
    path = _recording(tmp_path / "r.duckdb", new_samples=32, new_step_time=2.0)
    p = _progress(path)
    left = TOTAL - (OLD_STEPS + NEW_STEPS)
    # Every recent step is now timed at 2 s: the old world's 1 s steps, twice the share.
    assert p.steps_per_second == pytest.approx(0.5)
    assert p.eta_seconds == pytest.approx(left * 2.0)
    speed = next(line for line in render_report(path).splitlines()
                 if line.strip().startswith("speed "))
    assert speed.split()[1:] == ["0.5", "steps/s"]


def test_a_kept_per_rank_batch_keeps_the_measured_speed(tmp_path: Path) -> None:
    path = _recording(tmp_path / "r.duckdb", new_samples=16, new_step_time=1.0)
    p = _progress(path)
    assert p.steps_per_second == pytest.approx(1.0)
    assert p.eta_seconds == pytest.approx((TOTAL - OLD_STEPS - NEW_STEPS) * 1.0)


def test_rescaled_steps_scale_only_the_old_worlds_and_need_both_batches() -> None:
    old = [StepSample(rank=r, host="h", step=s, step_time=1.0, samples=16, ts=float(s))
           for s in (1, 2) for r in range(4)]
    new = [StepSample(rank=r, host="h", step=3, step_time=2.0, samples=32, ts=10.0)
           for r in range(2)]
    out = rescaled_steps([*old, *new], world=2, world_before=4, world_since=5.0)
    assert [s.step_time for s in out] == [2.0] * 8 + [2.0, 2.0]
    # A record covering 4 steps counts its samples over 4: 128 / 4 = 32 a step.
    four = [s._replace(samples=128, steps=4, step_time=8.0) for s in new]
    assert [s.step_time for s in rescaled_steps([*old, *four], world=2, world_before=4,
                                                world_since=5.0)][:8] == [2.0] * 8
    # Before the new world has stepped its batch is unknown: nothing is guessed.
    assert rescaled_steps(old, world=2, world_before=4, world_since=5.0) == old
    assert rescaled_steps([*old, *new], world=2, world_before=None, world_since=5.0) == [
        *old, *new]
    assert rescaled_steps([*old, *new], world=2, world_before=4, world_since=None) == [
        *old, *new]
