"""The operator's controls inside real Lightning runs on the CPU, and resuming from them.

Each control line is appended to the job's control file by the module itself, inside
the `training_step` of a chosen step: the callback's agreement at that step's end reads
it (rank 0 polls the file there), so the step a control takes effect at is exact, not a
race with the Reporter's timer. `examples/lightning_train.py` runs under torchrun with two
ranks as the docs show it in `test_examples_as_documented.py`, and
`test_lightning_agent.py` steers it through the agent (adjust, `c`, `e`, pause, resume).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from agent.hook.control import control_path
from agent.wire import checkpoints

lightning = pytest.importorskip("lightning")

from lightning.pytorch import LightningModule  # noqa: E402
from lightning.pytorch import Trainer as PLTrainer  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.plugins.io import TorchCheckpointIO  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from agent.hook.lightning import CockpitCallback  # noqa: E402

JOB = "job-a"
BASE_LR = 0.1
BATCH = 4


def _append_control(run_dir: Path, ident: str, **knobs: Any) -> None:
    path = Path(control_path(str(run_dir), JOB))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": ident, "ts": time.time(), "knobs": knobs}) + "\n")


class _Net(LightningModule):
    """A linear model that sends control lines at chosen steps and records its LR.

    `inject` maps a step (1-based, the one being trained) to (id, knobs); `lr_used` keeps
    the LR of the first param group as `training_step` sees it: inside the optimizer's
    step (automatic optimization runs the closure there), so the scaled one.
    """

    def __init__(self, run_dir: Path, inject: dict | None = None, schedule: str | None = None,
                 validate: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.run_dir = run_dir
        self.inject = inject or {}
        self.schedule = schedule
        self.validate = validate
        self.lr_used: dict[int, float] = {}

    def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step + 1
        if step in self.inject and self.trainer.is_global_zero:
            ident, knobs = self.inject.pop(step)
            _append_control(self.run_dir, ident, **knobs)
        self.lr_used[step] = self.trainer.optimizers[0].param_groups[0]["lr"]
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

    def validation_step(self, batch: list, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=BASE_LR)
        if self.schedule == "step":  # closed form: overwrites the LR at each step
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0 / (k + 1))
        elif self.schedule == "epoch":  # chainable: multiplies the LR it finds
            schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        else:
            return optimizer
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": self.schedule}}  # fmt: skip


def _data(batches: int, seed: int = 0) -> DataLoader:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batches * BATCH, 4, generator=gen)
    return DataLoader(TensorDataset(x, x.sum(-1)), batch_size=BATCH)


def _fit(tmp_path: Path, module: _Net, max_steps: int, batches: int = 16,
         val: bool = False, callbacks: list | None = None, ckpt_path: Any = None,
         ) -> CockpitCallback:  # fmt: skip
    cb = CockpitCallback(run_dir=str(tmp_path / "run"), job=JOB, register_atexit=False)
    trainer = PLTrainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, max_steps=max_steps, num_sanity_val_steps=0,
        enable_checkpointing=bool(callbacks), callbacks=[*(callbacks or []), cb],
    )  # fmt: skip
    trainer.fit(module, _data(batches), _data(2, seed=1) if val else None, ckpt_path=ckpt_path)
    cb.close()
    return cb


def _acks(spool: Any) -> dict[str, dict]:
    return {e["data"]["id"]: e for e in spool("event") if e["kind"] == "control_ack"}


@pytest.mark.parametrize("interval", ["step", "epoch"])
def test_lr_scale_multiplies_the_scheduled_lr_from_the_next_step(
        tmp_path: Path, spool, interval: str) -> None:  # fmt: skip
    """Both a closed-form per-step and a chainable per-epoch scheduler keep their own
    schedule: the scale multiplies it, it does not compound into it."""
    module = _Net(tmp_path / "run", inject={3: ("a1", {"lr_scale": 0.1})}, schedule=interval)
    _fit(tmp_path, module, max_steps=8, batches=3)

    def scheduled(step: int) -> float:  # the LR the schedule gives step `step` (1-based)
        return BASE_LR / step if interval == "step" else BASE_LR * 0.5 ** ((step - 1) // 3)

    train = spool("train")
    assert [r["step"] for r in train] == list(range(1, 9))
    expected = [scheduled(s) * (0.1 if s > 3 else 1.0) for s in range(1, 9)]
    assert [r["lr"] for r in train] == pytest.approx(expected)
    # The optimizer really stepped with it (the record is not just relabelled).
    assert [module.lr_used[s] for s in range(1, 9)] == pytest.approx(expected)
    ack = _acks(spool)["a1"]
    assert ack["data"]["ok"] is True and ack["data"]["knobs"] == {"lr_scale": 0.1}
    assert ack["data"]["applied_step"] == 4 and ack["step"] == 4  # once a step used it


def test_checkpoint_now_saves_a_checkpoint_the_agent_counts_valid(
        tmp_path: Path, spool, monkeypatch) -> None:  # fmt: skip
    """`c` at step 3 saves there; the ModelCheckpoint (no dirpath of its own) saves into
    the agent's checkpoint dir at step 4; both carry completion markers."""
    ckpt_dir = tmp_path / "ckpt"
    monkeypatch.setenv(checkpoints.CHECKPOINT_DIR_ENV, str(ckpt_dir))
    module = _Net(tmp_path / "run", inject={3: ("c1", {"checkpoint_now": True})})
    every_4 = ModelCheckpoint(every_n_train_steps=4, save_top_k=-1)
    _fit(tmp_path, module, max_steps=5, callbacks=[every_4])

    newest, skipped = checkpoints.newest_valid(ckpt_dir)
    assert newest is not None and newest.step == 4 and skipped == []
    assert Path(every_4.dirpath) == ckpt_dir
    asked, why = checkpoints.at_step(ckpt_dir, 3)
    assert asked is not None, why
    assert asked.path.name == "cockpit-step=3.ckpt"
    assert torch.load(asked.path, weights_only=False)["global_step"] == 3
    saved = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert [(e["step"], Path(e["data"]["path"]).parent) for e in saved] == [
        (3, ckpt_dir), (4, ckpt_dir)]
    assert saved[0]["data"]["bytes"] == asked.path.stat().st_size
    ack = _acks(spool)["c1"]
    assert ack["data"]["ok"] is True and ack["step"] == 3


def test_eval_now_runs_validation_after_the_step(tmp_path: Path, spool) -> None:
    module = _Net(tmp_path / "run", inject={2: ("e1", {"eval_now": True})})
    _fit(tmp_path, module, max_steps=5, val=True)  # the epoch (16 batches) never ends

    (evaluation,) = spool("eval")
    assert evaluation["step"] == 2 and evaluation["loss"] > 0
    ack = _acks(spool)["e1"]
    assert ack["data"]["ok"] is True and ack["step"] == 2


def test_what_the_callback_cannot_do_is_refused_with_the_reason(tmp_path: Path, spool) -> None:
    module = _Net(tmp_path / "run", inject={2: ("e1", {"eval_now": True}),
                                            3: ("u1", {"lr_scale": 0.5, "warmup": 5})})
    _fit(tmp_path, module, max_steps=5, val=False)

    assert spool("eval") == []
    acks = _acks(spool)
    assert acks["e1"]["data"]["ok"] is False
    assert "nothing to validate" in acks["e1"]["data"]["refused"]["eval_now"]
    # A knob the callback does not apply is refused; the rest of its line applied.
    assert acks["u1"]["data"]["ok"] is True and acks["u1"]["data"]["knobs"] == {"lr_scale": 0.5}
    assert acks["u1"]["data"]["refused"] == {
        "warmup": "the Lightning callback does not apply warmup"}
    assert [r["step"] for r in spool("train")] == [1, 2, 3, 4, 5]  # training went on
    assert [r["lr"] for r in spool("train")] == pytest.approx([BASE_LR] * 3 + [BASE_LR / 2] * 2)


class _TornWrite(TorchCheckpointIO):
    """A disk that fills up half-way through the checkpoint's file."""

    def save_checkpoint(self, checkpoint: dict, path: Any, storage_options: Any = None) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"half a checkpoint")
        raise OSError(28, "No space left on device")


def test_a_save_that_raised_gets_no_marker(tmp_path: Path, spool) -> None:
    ckpt_dir = tmp_path / "ckpt"
    cb = CockpitCallback(run_dir=str(tmp_path / "run"), job=JOB, register_atexit=False)
    trainer = PLTrainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, max_steps=4, plugins=[_TornWrite()], callbacks=[
            ModelCheckpoint(dirpath=str(ckpt_dir), every_n_train_steps=2), cb],
    )  # fmt: skip
    module = _Net(tmp_path / "run")
    with pytest.raises(OSError, match="No space left"):
        trainer.fit(module, _data(8))
    # The callback lives on (a validation after the failure): the torn file stays unmarked.
    trainer.validate(module, _data(2, seed=1), verbose=False)
    cb.close()

    (torn,) = ckpt_dir.glob("*.ckpt")
    assert not checkpoints.marker_path(torn).exists()
    newest, skipped = checkpoints.newest_valid(ckpt_dir)
    assert newest is None and [path for path, _why in skipped] == [str(torn)]
    assert not [e for e in spool("event") if e["kind"] == "checkpoint_saved"]


def test_fit_from_the_checkpoint_continues_at_its_step_and_says_resumed(
        tmp_path: Path, spool, monkeypatch) -> None:  # fmt: skip
    ckpt_dir = tmp_path / "ckpt"
    monkeypatch.setenv(checkpoints.CHECKPOINT_DIR_ENV, str(ckpt_dir))
    first = _Net(tmp_path / "run", inject={2: ("a1", {"lr_scale": 0.5}),
                                           3: ("c1", {"checkpoint_now": True})})
    _fit(tmp_path, first, max_steps=6)
    found, why = checkpoints.at_step(ckpt_dir, 3)
    assert found is not None, why

    # The restarted process, as the agent starts it: the checkpoint in the environment,
    # passed to fit by the one line the callback's docs ask for.
    monkeypatch.setenv(checkpoints.RESUME_ENV, str(found.path))
    second = _Net(tmp_path / "run")
    _fit(tmp_path, second, max_steps=6, ckpt_path=os.environ.get("COCKPIT_RESUME_FROM"))

    steps = [r["step"] for r in spool("train")]
    assert steps == [1, 2, 3, 4, 5, 6, 4, 5, 6]
    (resumed,) = [e for e in spool("event") if e["kind"] == "resumed"]
    assert resumed["step"] == 3 and resumed["data"]["path"] == str(found.path)
    # The operator's scale outlives the restart (restored by the Reporter, agreed at start).
    assert [r["lr"] for r in spool("train")[-3:]] == pytest.approx([BASE_LR * 0.5] * 3)
    assert [second.lr_used[s] for s in (4, 5, 6)] == pytest.approx([BASE_LR * 0.5] * 3)
    assert not [a for a in spool("alert") if a["code"] == "resume_not_loaded"]


def test_a_resume_checkpoint_fit_did_not_load_raises_an_alert(
        tmp_path: Path, spool, monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv(checkpoints.RESUME_ENV, str(tmp_path / "cockpit-step=3.ckpt"))
    _fit(tmp_path, _Net(tmp_path / "run"), max_steps=2)

    (alert,) = [a for a in spool("alert") if a["code"] == "resume_not_loaded"]
    assert "starts again from step 0" in alert["what"] and "ckpt_path" in alert["hint"]
    assert not [e for e in spool("event") if e["kind"] == "resumed"]
