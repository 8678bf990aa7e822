"""The example trainer for real: torchrun with two gloo ranks on CPU, kills and resumes."""

from __future__ import annotations

import json
import time

import pytest

from cockpit.analysis.markers import chart_markers
from cockpit.snapshot import Marker
from examples.charlm import checkpoint
from examples.charlm.config import load_config
from examples.charlm.train import lr_at
from tests.harness.torchrun import FAST_SETTINGS, spool_files

# Above the sum of a test's own waits, so that a slow run fails on the wait that names
# what it waited for (two workers share the cores: a run takes twice as long).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _checkpoint_events(run) -> list[dict]:
    return [e for e in run.records("event") if e["kind"] == "checkpoint_saved"]


def test_two_ranks_learn_and_follow_operator_controls(tmp_path, charlm_data, run_charlm) -> None:
    # Paced (FAST_SETTINGS' train.pace, 50 ms of rest before each step): the 200 steps
    # after the control is sent take 10 s at the least, time for the records to show
    # step 100 and for rank 0 to read the control (every 0.5 s). Unpaced, a run on a
    # busy machine could train to its end before reading it, and acknowledge nothing.
    run = run_charlm(tmp_path, nproc=2, steps=300, data_dir=charlm_data)
    # Mid-run, the operator halves the LR and asks for an evaluation now.
    run.wait_for(lambda r: any(t["step"] >= 100 for t in r.records("train")), timeout=90)
    run.control_path.parent.mkdir(parents=True, exist_ok=True)
    with open(run.control_path, "a") as f:
        f.write(json.dumps({"id": "op-1", "ts": time.time(),
                            "knobs": {"lr_scale": 0.5, "eval_now": True}}) + "\n")  # fmt: skip
    assert run.wait(timeout=90) == 0, run.output()

    evals = run.records("eval")
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 300
    first, last = evals[0]["loss"], evals[-1]["loss"]
    assert first > 4.0, f"an untrained model should be near ln(128): {evals}"
    assert last < 3.0 and last < first - 1.5, f"validation loss did not drop: {evals}"

    train = run.records("train")
    for rank in (0, 1):
        assert [t["step"] for t in train if t["rank"] == rank] == list(range(1, 301))
    assert all(t["loss"] is not None and t["grad_norm"] is not None for t in train)
    assert any(t["comm_time"] is not None for t in train)
    assert all(t["data_time"] is not None and t["compute_time"] is not None for t in train)
    # The pace's rest is in each step's time and in none of its phases.
    for t in (t for t in train if t["step"] > 1):
        phases = t["data_time"] + t["compute_time"] + (t["comm_time"] or 0.0)
        assert t["step_time"] - phases >= 0.049, t

    (run_record,) = run.records("run")
    assert run_record["total_steps"] == 300 and run_record["world_size"] == 2
    assert run_record["seed"] == run_record["config"]["seed"]
    assert len(run_record["data_version"]) == 64
    assert [e["step"] for e in _checkpoint_events(run)] == [100, 200, 300]

    (ack,) = [e for e in run.records("event") if e["kind"] == "control_ack"]
    assert ack["data"]["id"] == "op-1" and ack["data"]["ok"] is True
    applied = ack["data"]["applied_step"]
    cfg = load_config(None, [*FAST_SETTINGS, "train.max_steps=300"])
    every = cfg["control"]["every"]
    # Rank 0's Reporter applies it at a step where the ranks agree (a multiple of
    # `every`), and the ranks use it from the following step: the ack names that step,
    # once it was trained with the new LR and the requested evaluation was recorded.
    agreed = applied - 1
    assert agreed % every == 0, applied
    assert any(e["step"] == agreed for e in evals), "eval_now did not trigger an evaluation"
    # The loss chart marks the lasting change where it took effect, not the one-shot eval.
    assert chart_markers(run.records("event")) == (Marker(applied, "adjust", "lr_scale=0.5"),)
    for t in train:
        scale = 0.5 if t["step"] > agreed else 1.0
        assert t["lr"] == pytest.approx(lr_at(t["step"], cfg) * scale), t


def test_sigkill_then_resume_auto_continues_from_last_complete_checkpoint(
    tmp_path, charlm_data, run_charlm
) -> None:
    settings = ["--set", "checkpoint.every=10", "--set", "eval.at_start=false",
                "--set", "eval.every=100000"]  # fmt: skip
    run = run_charlm(tmp_path, nproc=2, steps=5000, data_dir=charlm_data, extra_args=settings)
    run.wait_for(lambda r: len(_checkpoint_events(r)) >= 2, timeout=90)
    run.kill()
    killed_at = time.time()

    newest = checkpoint.latest_valid(run.checkpoint_dir, lambda _m: None)
    assert newest is not None
    resumed_step = int(newest.name[len("ckpt-") : -len(".pt")])
    assert resumed_step >= 20
    # While no process runs (as in a pause), the operator halves the LR.
    run.control_path.parent.mkdir(parents=True, exist_ok=True)
    with open(run.control_path, "a") as f:
        f.write(json.dumps({"id": "op-paused", "ts": time.time(),
                            "knobs": {"lr_scale": 0.5}}) + "\n")  # fmt: skip

    again = run_charlm(tmp_path, nproc=2, steps=resumed_step + 5, data_dir=charlm_data,
                        extra_args=[*settings, "--resume", "auto"],
                        log_name="restart.log")  # fmt: skip
    assert again.wait(timeout=90) == 0, again.output()

    assert f"resumed from {newest} (step {resumed_step})" in again.output()
    new_files = [(h, recs) for h, recs in spool_files(run.spool_dir) if h["ts"] > killed_at]
    assert sorted(h["rank"] for h, _ in new_files) == [0, 1]
    for _header, records in new_files:
        steps = [r["step"] for r in records if r["t"] == "train"]
        assert steps == list(range(resumed_step + 1, resumed_step + 6))
    resumed = [e for _h, recs in new_files for e in recs if e.get("kind") == "resumed"]
    assert [e["step"] for e in resumed] == [resumed_step]
    (mark,) = chart_markers(resumed)
    assert (mark.step, mark.kind) == (resumed_step, "restart") and "resumed" in mark.text
    # The LR set while it was down is in force from the first step, and said so there.
    events = [r for _h, recs in new_files for r in recs if r["t"] == "event"]
    assert [(m.step, m.kind, m.text) for m in chart_markers(events) if m.kind == "adjust"] == [
        (resumed_step + 1, "adjust", "lr_scale=0.5")]
    cfg = load_config(None, [*FAST_SETTINGS, f"train.max_steps={resumed_step + 5}"])
    for _header, records in new_files:
        for t in (r for r in records if r["t"] == "train"):
            assert t["lr"] == pytest.approx(lr_at(t["step"], cfg) * 0.5), t


def test_truncated_newest_checkpoint_is_skipped_single_process(
    tmp_path, charlm_data, run_charlm
) -> None:
    """Also covers the single-process path with bfloat16 autocast."""
    settings = ["--set", "checkpoint.every=10", "--set", "eval.at_start=false",
                "--set", "eval.every=100000", "--set", "amp.enabled=true"]  # fmt: skip
    run = run_charlm(tmp_path, nproc=1, steps=30, data_dir=charlm_data, extra_args=settings)
    assert run.wait(timeout=60) == 0, run.output()
    newest = run.checkpoint_dir / "ckpt-00000030.pt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 3])

    again = run_charlm(tmp_path, nproc=1, steps=33, data_dir=charlm_data,
                        extra_args=[*settings, "--resume", "auto"],
                        log_name="restart.log")  # fmt: skip
    assert again.wait(timeout=60) == 0, again.output()
    out = again.output()
    assert f"skipping checkpoint {newest}: truncated or extended" in out
    previous = run.checkpoint_dir / "ckpt-00000020.pt"
    assert f"resumed from {previous} (step 20)" in out
    _header, records = spool_files(run.spool_dir)[-1]
    assert [r["step"] for r in records if r["t"] == "train"] == list(range(21, 34))
    skipped = [r for r in records if r.get("kind") == "checkpoint_skipped"]
    assert len(skipped) == 1 and "ckpt-00000030.pt" in skipped[0]["msg"]


def test_bad_settings_fail_with_a_message_not_a_traceback(
    tmp_path, charlm_data, run_charlm
) -> None:
    fp16 = ["--set", "amp.dtype=float16", "--set", "amp.enabled=true"]
    run = run_charlm(tmp_path, nproc=1, steps=5, data_dir=charlm_data, extra_args=fp16)
    assert run.wait(timeout=60) == 2
    out = run.output()
    assert "charlm: error: amp.dtype float16 needs a CUDA device; use bfloat16 on CPU" in out
    assert "Traceback" not in out
