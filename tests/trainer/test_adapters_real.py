"""The Lightning and Transformers adapters inside real, tiny training runs on the CPU.

`test_adapters.py` pins the hook logic with stand-ins; these runs check that the
frameworks really call the hooks with the objects, in the order and at the moments the
adapters assume (a checkpoint file exists when its event is sent, a loss is a number...).
Skipped where the `adapters` extra is not installed.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.harness.torchrun import ROOT

lightning = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")

from lightning.pytorch import LightningModule  # noqa: E402
from lightning.pytorch import Trainer as PLTrainer  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from agent.hook.hf import CockpitCallback as HFCallback  # noqa: E402
from agent.hook.lightning import CockpitCallback as PLCallback  # noqa: E402

VOCAB = 64
SEQ = 16


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# ---------------------------------------------------------------------- Lightning

VALIDATION_PAUSE = 0.05  # s per validation batch: makes validation time visible


class _Regression(LightningModule):
    """A linear model that logs `train_loss` and records what it saw, to compare with the spool.

    `micro` keeps (optimizer step the batch belongs to, loss, batch size) per training
    batch; `lr_used` the LR of each step; `validation_seconds` the time spent inside
    `validation_step` (which sleeps, so that validation takes a noticeable time).
    """

    def __init__(self, scheduler: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.scheduler = scheduler
        self.micro: list[tuple[int, float, int]] = []
        self.lr_used: dict[int, float] = {}
        self.validation_seconds = 0.0

    def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)
        self.log("train_loss", loss)
        step = self.trainer.global_step + 1
        self.micro.append((step, loss.item(), len(x)))
        self.lr_used[step] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return loss

    def validation_step(self, batch: list, batch_idx: int) -> None:
        start = time.perf_counter()
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y))
        self.log("val_mae", (self.layer(x).squeeze(-1) - y).abs().mean())
        time.sleep(VALIDATION_PAUSE)
        self.validation_seconds += time.perf_counter() - start

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        if not self.scheduler:
            return optimizer
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1.0 / (k + 1))
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": schedule, "interval": "step"}}  # fmt: skip


def _regression_data(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=gen)
    return TensorDataset(x, x.sum(-1))


def _pl_trainer(tmp_path: Path, callback: PLCallback, **kwargs: Any) -> PLTrainer:
    kwargs.setdefault("callbacks", [])
    kwargs["callbacks"] = [*kwargs["callbacks"], callback]
    return PLTrainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, **kwargs)  # fmt: skip


def test_lightning_trainer_run_reaches_the_spool(tmp_path: Path, spool) -> None:
    max_steps, batch, every = 6, 4, 3
    ckpt_dir = tmp_path / "ckpt"
    cb = PLCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    checkpoint = ModelCheckpoint(dirpath=str(ckpt_dir), every_n_train_steps=every,
                                 save_top_k=-1)  # fmt: skip
    trainer = _pl_trainer(
        tmp_path, cb, max_steps=max_steps, limit_val_batches=2, val_check_interval=every,
        num_sanity_val_steps=1, enable_checkpointing=True, callbacks=[checkpoint],
    )  # fmt: skip
    module = _Regression()
    val_data = DataLoader(_regression_data(16, 1), batch_size=batch)
    trainer.fit(module, DataLoader(_regression_data(64, 0), batch_size=batch), val_data)
    trainer.validate(module, val_data, verbose=False)
    cb.close()

    (run,) = spool("run")
    assert run["total_steps"] == max_steps and run["world_size"] == 1
    train = spool("train")
    assert [r["step"] for r in train] == list(range(1, max_steps + 1))
    assert [r["loss"] for r in train] == pytest.approx([loss for _s, loss, _n in module.micro])
    assert all(r["lr"] == 0.05 and r["samples"] == batch and r["epoch"] == 0 for r in train)
    assert all(r["compute_time"] is not None for r in train)
    assert train[0]["data_time"] is None and all(r["data_time"] is not None for r in train[1:])
    # The step after a validation: validating is neither data loading nor compute.
    after_val = train[every]
    assert (after_val["data_time"] + after_val["compute_time"] + after_val["ckpt_time"]
            + module.validation_seconds / 2 <= after_val["step_time"])  # fmt: skip
    evals = spool("eval")
    # No eval from the sanity check; the last one is trainer.validate()'s.
    assert [e["step"] for e in evals] == [every, 2 * every, 2 * every]
    assert all(_finite_number(e["loss"]) for e in evals)
    assert all(set(e["metrics"]) == {"val_mae"} for e in evals)
    saved = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert [e["step"] for e in saved] == [every, 2 * every]
    assert sorted(e["data"]["path"] for e in saved) == sorted(map(str, ckpt_dir.glob("*.ckpt")))
    for event in saved:
        assert event["data"]["bytes"] == os.path.getsize(event["data"]["path"])
        assert _finite_number(event["data"]["seconds"]) and event["data"]["seconds"] >= 0
    # One Reporter for fit and validate: one spool file.
    assert len(list((tmp_path / "run" / "spool" / "job-a").glob("rank-0.*.ndjson"))) == 1


def test_lightning_accumulation_reports_each_optimizer_step(tmp_path: Path, spool) -> None:
    """Accumulating 2 of 5 batches per epoch: the epoch's last step has one batch."""
    max_steps, batch = 5, 4
    cb = PLCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    trainer = _pl_trainer(tmp_path, cb, max_steps=max_steps, accumulate_grad_batches=2,
                          limit_val_batches=0, enable_checkpointing=False)  # fmt: skip
    module = _Regression(scheduler=True)
    trainer.fit(module, DataLoader(_regression_data(5 * batch, 0), batch_size=batch))
    cb.close()

    train = spool("train")
    steps = list(range(1, max_steps + 1))
    assert [r["step"] for r in train] == steps
    per_step = {s: [(loss, n) for step, loss, n in module.micro if step == s] for s in steps}
    assert [len(per_step[s]) for s in steps] == [2, 2, 1, 2, 2]
    assert [r["samples"] for r in train] == [sum(n for _l, n in per_step[s]) for s in steps]
    expected_loss = [sum(loss for loss, _n in per_step[s]) / len(per_step[s]) for s in steps]
    assert [r["loss"] for r in train] == pytest.approx(expected_loss)
    assert [r["lr"] for r in train] == pytest.approx([module.lr_used[s] for s in steps])
    assert [r["epoch"] for r in train] == [0, 0, 0, 1, 1]


# ---------------------------------------------------------------------- lazy imports


def test_adapters_import_without_loading_or_needing_their_frameworks() -> None:
    """Importing an adapter module loads no framework; with none installed it still works."""
    code = (
        "import sys\n"
        "import agent.hook.lightning, agent.hook.hf\n"
        "loaded = [m for m in ('lightning', 'pytorch_lightning', 'transformers')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "for name in ('lightning', 'pytorch_lightning', 'transformers'):\n"
        "    sys.modules[name] = None  # as if not installed: importing it raises\n"
        "from agent.hook.lightning import CockpitCallback as PL, CockpitLightningHooks\n"
        "from agent.hook.hf import CockpitCallback as HF, CockpitHFHooks\n"
        "assert PL.__mro__[1:] == (CockpitLightningHooks, object), PL.__mro__\n"
        "assert HF.__mro__[1:] == (CockpitHFHooks, object), HF.__mro__\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
