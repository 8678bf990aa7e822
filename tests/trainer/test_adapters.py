"""Lightning and Transformers adapters, driven by stand-ins for the frameworks' objects.

Neither framework is a dependency: the stand-ins carry exactly the attributes the
adapters read, and the tests check what reaches the spool.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agent.hook.hf import CockpitCallback as HFCallback
from agent.hook.lightning import CockpitCallback as PLCallback
from agent.hook.lightning import batch_size


def _pl_trainer(tmp_path: Path, **overrides) -> SimpleNamespace:
    optimizer = SimpleNamespace(param_groups=[{"lr": 0.01}])
    trainer = SimpleNamespace(
        global_rank=0, world_size=1, is_global_zero=True, max_steps=-1, max_epochs=3,
        estimated_stepping_batches=30, global_step=0, current_epoch=0,
        accumulate_grad_batches=1, optimizers=[optimizer], sanity_checking=False,
        callback_metrics={}, checkpoint_callback=SimpleNamespace(last_model_path=""),
    )  # fmt: skip
    for key, value in overrides.items():
        setattr(trainer, key, value)
    return trainer


def test_lightning_callback_reports_steps_eval_and_checkpoints(tmp_path, spool) -> None:
    run_dir = str(tmp_path / "run")
    cb = PLCallback(run_dir=run_dir, job="job-a", register_atexit=False)
    trainer = _pl_trainer(tmp_path)
    cb.setup(trainer, None, "fit")
    cb.on_train_start(trainer, None)
    batch = (torch.zeros(8, 4), torch.zeros(8))
    for idx in range(3):
        cb.on_train_batch_start(trainer, None, batch, idx)
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, None, {"loss": torch.tensor(2.0 - idx)}, batch, idx)
    trainer.callback_metrics = {"val_loss": torch.tensor(1.25), "val_acc": 0.5, "train_x": 1}
    cb.on_validation_end(trainer, None)
    ckpt = tmp_path / "epoch=0.ckpt"
    cb.on_save_checkpoint(trainer, None, {})
    ckpt.write_bytes(b"w" * 100)  # Lightning writes the file after the hook
    trainer.checkpoint_callback.last_model_path = str(ckpt)
    cb.on_train_end(trainer, None)
    cb.teardown(trainer, None, "fit")

    (run,) = spool("run")
    assert run["total_steps"] == 30 and run["total_epochs"] == 3 and run["world_size"] == 1
    train = spool("train")
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["loss"] for r in train] == [2.0, 1.0, 0.0]
    assert all(r["lr"] == 0.01 and r["samples"] == 8 for r in train)
    assert train[0]["data_time"] is None and train[1]["data_time"] is not None
    assert all(r["compute_time"] is not None for r in train)
    (ev,) = spool("eval")
    assert ev["step"] == 3 and ev["loss"] == 1.25 and ev["metrics"] == {"val_acc": 0.5}
    (saved,) = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert saved["data"]["path"] == str(ckpt) and saved["data"]["bytes"] == 100
    assert saved["step"] == 3


def test_lightning_reports_once_per_accumulation_and_skips_sanity_check(tmp_path, spool) -> None:
    cb = PLCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False,
                    declare=False)  # fmt: skip
    trainer = _pl_trainer(tmp_path, accumulate_grad_batches=2, sanity_checking=True)
    cb.setup(trainer, None, "fit")
    trainer.callback_metrics = {"val_loss": 3.0}
    cb.on_validation_end(trainer, None)
    for idx in range(4):
        cb.on_train_batch_start(trainer, None, {"x": torch.zeros(2, 1)}, idx)
        if idx % 2 == 1:
            trainer.global_step += 1
        cb.on_train_batch_end(trainer, None, torch.tensor(1.0), {"x": torch.zeros(2, 1)}, idx)
    cb.teardown(trainer, None, "fit")
    assert [r["step"] for r in spool("train")] == [1, 2]
    assert spool("eval") == [] and spool("run") == []


def test_batch_size_of_common_batch_shapes() -> None:
    assert batch_size(torch.zeros(5, 2)) == 5
    assert batch_size([torch.zeros(3), torch.zeros(3)]) == 3
    assert batch_size({"ids": torch.zeros(7, 4)}) == 7
    assert batch_size("text") is None and batch_size([]) is None


def test_hf_callback_reports_logs_evals_and_saves(tmp_path, spool) -> None:
    out = tmp_path / "out"
    args = SimpleNamespace(
        process_index=0, world_size=2, num_train_epochs=1.5, seed=11, output_dir=str(out),
        per_device_train_batch_size=4, gradient_accumulation_steps=2,
        to_dict=lambda: {"learning_rate": 5e-5, "output_dir": str(out)},
    )  # fmt: skip
    state = SimpleNamespace(max_steps=100, global_step=0, epoch=0.0, is_world_process_zero=True)
    cb = HFCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    cb.on_train_begin(args, state, None)
    for _ in range(5):
        cb.on_step_begin(args, state, None)
        state.global_step += 1
        cb.on_step_end(args, state, None)
    cb.on_log(args, state, None, logs={"loss": 1.5, "learning_rate": 4e-5, "grad_norm": 0.9,
                                       "epoch": 0.05, "num_tokens": 640.0})  # fmt: skip
    cb.on_log(args, state, None, logs={"train_runtime": 10.0})  # summary: no train record
    cb.on_evaluate(args, state, None, metrics={"eval_loss": 1.4, "eval_accuracy": 0.6,
                                               "epoch": 0.05})  # fmt: skip
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "model.safetensors").write_bytes(b"m" * 300)
    cb.on_save(args, state, None)
    cb.on_train_end(args, state, None)

    (run,) = spool("run")
    assert run["total_steps"] == 100 and run["total_epochs"] == 2 and run["seed"] == 11
    assert run["world_size"] == 2 and run["config"]["learning_rate"] == 5e-5
    (train,) = spool("train")
    assert train["step"] == 5 and train["loss"] == 1.5 and train["lr"] == 4e-5
    assert train["grad_norm"] == 0.9 and train["epoch"] == 0.05
    assert train["samples"] == 4 * 2 * 5
    assert train["extra"] == {"num_tokens": 640.0, "steps": 5}
    assert train["compute_time"] is not None and train["data_time"] is not None
    (ev,) = spool("eval")
    assert ev["loss"] == 1.4 and ev["metrics"] == {"accuracy": 0.6, "epoch": 0.05}
    (saved,) = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert saved["data"]["path"] == str(out / "checkpoint-5") and saved["data"]["bytes"] == 300


def test_hf_non_zero_process_does_not_duplicate_eval_or_save(tmp_path, spool) -> None:
    args = SimpleNamespace(process_index=1, world_size=2, output_dir=str(tmp_path))
    state = SimpleNamespace(max_steps=10, global_step=3, is_world_process_zero=False)
    cb = HFCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    cb.on_train_begin(args, state, None)
    cb.on_evaluate(args, state, None, metrics={"eval_loss": 1.0})
    cb.on_save(args, state, None)
    cb.on_train_end(args, state, None)
    records = spool()
    assert [r["t"] for r in records] == []
    (header_file,) = (tmp_path / "run" / "spool" / "job-a").glob("rank-1.*.ndjson")
    assert header_file.exists()


class _Clock:
    """`perf_counter` as the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _paused_records(monkeypatch, clock: _Clock, pause: float) -> None:
    """Each step's record takes `pause` seconds before it is stamped (a busy host's
    scheduler between the hook and the record)."""
    from agent.hook.reporter import Reporter

    monkeypatch.setattr("agent.hook.reporter._perf", clock)
    step = Reporter.step

    def slow(self, *args, **kwargs) -> None:
        clock.now += pause
        step(self, *args, **kwargs)

    monkeypatch.setattr(Reporter, "step", slow)


def _timed_apart(train: list[dict]) -> None:
    """Each step: 0.1 s waiting for its batch, 1 s computing, 0.5 s recorded; the pause
    is in the step's time and in neither phase."""
    assert [r["step"] for r in train] == [1, 2, 3]
    for record in train[1:]:
        assert record["step_time"] == pytest.approx(1.6)
        assert record["data_time"] == pytest.approx(0.1)
        assert record["compute_time"] == pytest.approx(1.0)


def test_hf_a_pause_while_a_step_is_recorded_is_not_the_next_steps_data_time(
        tmp_path, spool, monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr("agent.hook.hf.time", SimpleNamespace(perf_counter=clock))
    _paused_records(monkeypatch, clock, pause=0.5)
    args = SimpleNamespace(process_index=0, world_size=1, output_dir=str(tmp_path),
                           per_device_train_batch_size=2, gradient_accumulation_steps=1,
                           to_dict=lambda: {})  # fmt: skip
    state = SimpleNamespace(max_steps=10, global_step=0, epoch=0.0, is_world_process_zero=True)
    cb = HFCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    cb.on_train_begin(args, state, None)
    for _ in range(3):
        clock.now += 0.1  # the batch
        cb.on_step_begin(args, state, None)
        state.global_step += 1
        clock.now += 1.0
        cb.on_step_end(args, state, None)
        cb.on_log(args, state, None, logs={"loss": 1.0})
    cb.on_train_end(args, state, None)
    _timed_apart(spool("train"))


def test_lightning_a_pause_while_a_step_is_recorded_is_not_the_next_steps_data_time(
        tmp_path, spool, monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr("agent.hook.lightning.time",
                        SimpleNamespace(perf_counter=clock, time=lambda: 1.7e9))
    _paused_records(monkeypatch, clock, pause=0.5)
    cb = PLCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    trainer = _pl_trainer(tmp_path)
    cb.setup(trainer, None, "fit")
    cb.on_train_start(trainer, None)
    batch = (torch.zeros(2, 4), torch.zeros(2))
    for idx in range(3):
        clock.now += 0.1  # the batch
        cb.on_train_batch_start(trainer, None, batch, idx)
        trainer.global_step += 1
        clock.now += 1.0
        cb.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0)}, batch, idx)
    cb.on_train_end(trainer, None)
    cb.teardown(trainer, None, "fit")
    _timed_apart(spool("train"))
