"""A trainer that logs every 5 optimizer steps, read back: counted per step, LR shown.

The records are what the Transformers adapter writes with `logging_steps=5` (one per 5
steps of 0.85 s, `extra.steps=5`, step time and samples summed over the 5), stored
through the real ingest; the snapshot (the panes' one source), run info and the report
must count optimizer steps, not records. The operator's `lr_scale=0.1`, acknowledged at
step 100, is in the records after it, and shown with the LR on either side.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.details import RunInfo
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot, details
from cockpit.snapshot import LrChange
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0, header

STEP_S = 0.85
EVERY = 5
BATCH = 8  # per rank per optimizer step
RANKS = 2
TOTAL = 1000
ADJUST_AT = 100
SCALE = 0.1
JOB = "hf-job"


def lr(step: int) -> float:
    """The schedule (linear decay), with the operator's scale after ADJUST_AT."""
    return 1e-3 * (1 - step / TOTAL) * (SCALE if step > ADJUST_AT else 1.0)


def step_ts(step: int) -> float:
    return TS0 + 10.0 + step * STEP_S


def lines(first: int, last: int, seq: int) -> tuple[bytes, int]:
    out = []
    for step in range(first, last + 1, EVERY):
        for rank in range(RANKS):
            seq += 1
            out.append(encode("train", seq, {
                "job": JOB, "rank": rank, "step": step, "loss": 3.0 - step / 1000,
                "lr": lr(step), "samples": BATCH * EVERY,
                # The process's first record has no step time (start-up is no step).
                "step_time": None if step == EVERY else EVERY * STEP_S,
                "data_time": 0.1 * EVERY * STEP_S, "compute_time": 0.9 * EVERY * STEP_S,
                "extra": {"steps": EVERY}}, ts=step_ts(step) + 0.01 * rank))
        if step == ADJUST_AT:
            seq += 1
            out.append(encode("event", seq, {
                "kind": "control_ack", "job": JOB, "rank": 0, "step": ADJUST_AT,
                "msg": f"applied lr_scale={SCALE}",
                "data": {"op": "adjust", "ok": True, "knobs": {"lr_scale": SCALE}}},
                ts=step_ts(step) + 0.5))
    return b"".join(out), seq


def write(store: Store, last: int, first: int = EVERY, seq: int = 0) -> int:
    if seq == 0:
        run = encode("run", 1, {"job": JOB, "rank": 0, "total_steps": TOTAL,
                                "world_size": RANKS}, ts=TS0 + 1)
        body, seq = lines(first, last, 1)
        store.ingest("h1", header() + run + body)
        return seq
    body, seq = lines(first, last, seq)
    store.ingest("h1", body)
    return seq


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "hf.duckdb"
    with Store(path) as store:
        write(store, 200)
    return path


def test_speed_samples_step_time_and_eta_count_optimizer_steps(recording: Path) -> None:
    with Store(recording, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY",
                              now=step_ts(200))
    p, f = snap.progress, snap.efficiency
    assert p.step == 200 and p.total_steps == TOTAL
    assert p.steps_per_second == pytest.approx(1 / STEP_S)
    assert p.samples == 200 * BATCH * RANKS
    assert p.percent == pytest.approx(20.0)
    assert p.eta_seconds == pytest.approx((TOTAL - 200) * STEP_S)
    assert f.step_time_median == pytest.approx(STEP_S)
    assert f.samples_per_s == pytest.approx(RANKS * BATCH / STEP_S)
    assert f.data_wait_pct == pytest.approx(10.0)
    assert f.throughput_history.last[-1] == pytest.approx(RANKS * BATCH / STEP_S)
    assert not p.stalled


def test_a_live_view_folding_in_new_records_counts_the_same(tmp_path: Path) -> None:
    with Store(tmp_path / "live.duckdb") as store:
        seq = write(store, 150)
        reader = StoreReader(store)
        build_snapshot(reader, until_ts=None, label="LIVE", now=step_ts(150))
        write(store, 200, first=155, seq=seq)
        live = build_snapshot(reader, until_ts=None, label="LIVE", now=step_ts(200))
        fresh = build_snapshot(StoreReader(store), until_ts=None, label="LIVE",
                               now=step_ts(200))
    assert live.progress == fresh.progress and live.efficiency == fresh.efficiency
    assert live.progress.samples == 200 * BATCH * RANKS
    assert live.progress.steps_per_second == pytest.approx(1 / STEP_S)
    assert live.effect.lr_changes == fresh.effect.lr_changes


def test_the_lr_and_the_operators_change_of_it_are_shown(recording: Path) -> None:
    with Store(recording, read_only=True) as store:
        reader = StoreReader(store)
        effect = build_snapshot(reader, until_ts=None, label="REPLAY").effect
        info = details(reader, "run")
        # At the acknowledgement, before the next record: the LR after it is not known.
        early = build_snapshot(StoreReader(store), until_ts=step_ts(ADJUST_AT) + 1,
                               label="REPLAY").effect
    assert effect.last_lr == pytest.approx(lr(200))
    assert effect.lr_scale == "0.1"
    assert effect.lr_changes == (
        LrChange(ADJUST_AT, "lr_scale=0.1", lr(ADJUST_AT), lr(ADJUST_AT + EVERY)),)
    assert effect.lr.last[-1] == pytest.approx(lr(200))
    assert early.lr_changes == (LrChange(ADJUST_AT, "lr_scale=0.1", lr(ADJUST_AT), None),)
    assert isinstance(info, RunInfo)
    assert info.lr == pytest.approx(lr(200)) and info.lr_scale == "0.1"


@pytest.mark.slow
def test_the_report_counts_steps_and_prints_the_lr(recording: Path) -> None:
    text = render_report(recording)
    assert re.search(r"\n  samples seen +3,200\n", text)
    assert re.search(r"\n  speed +1\.18 steps/s\n", text)
    assert re.search(r"\n  step time +0\.85 s \(median\)\n", text)
    assert re.search(r"\n  ETA +11m 20s \(estimate", text)
    assert re.search(r"\n  LR +8e-05 \(lr_scale=0\.1 in force\)\n", text)
    assert re.search(r"\n  LR changes +lr_scale=0\.1 at step 100: 0\.0009 → 8\.95e-05\n",
                     text)
    markdown = render_report(recording, fmt="markdown")
    assert "| LR changes | lr_scale=0.1 at step 100: 0.0009 → 8.95e-05 |" in markdown
    data = json.loads(render_report(recording, fmt="json"))
    assert data["progress"]["samples"] == 3200
    assert data["progress"]["steps_per_second"] == pytest.approx(1 / STEP_S)
    e = data["effect"]
    assert e["last_lr"] == pytest.approx(lr(200)) and e["lr_scale"] == "0.1"
    assert e["lr_changes"] == [{"step": ADJUST_AT, "text": "lr_scale=0.1",
                                "before": pytest.approx(lr(ADJUST_AT)),
                                "after": pytest.approx(lr(ADJUST_AT + EVERY))}]
    assert len(e["lr"]["step"]) == len(e["lr"]["lr"]) > 0
