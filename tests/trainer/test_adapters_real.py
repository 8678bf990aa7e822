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
pytest.importorskip("accelerate")  # the Transformers Trainer needs it

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
    `validation_step` per validation run (it sleeps, so that validating takes time).
    """

    def __init__(self, scheduler: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.scheduler = scheduler
        self.micro: list[tuple[int, float, int]] = []
        self.lr_used: dict[int, float] = {}
        self.validation_seconds: list[float] = []

    def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)
        self.log("train_loss", loss)
        step = self.trainer.global_step + 1
        self.micro.append((step, loss.item(), len(x)))
        self.lr_used[step] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return loss

    def on_validation_epoch_start(self) -> None:
        self.validation_seconds.append(0.0)

    def validation_step(self, batch: list, batch_idx: int) -> None:
        start = time.perf_counter()
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y))
        self.log("val_mae", (self.layer(x).squeeze(-1) - y).abs().mean())
        time.sleep(VALIDATION_PAUSE)
        self.validation_seconds[-1] += time.perf_counter() - start

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


def _pl_trainer(callback: PLCallback, **kwargs: Any) -> PLTrainer:
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
        cb, max_steps=max_steps, limit_val_batches=2, val_check_interval=every,
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
    # Validations: sanity check, after steps 3 and 6, trainer.validate(). The time of the
    # one between steps 3 and 4 is in step 4's step_time, but not in its phases.
    assert len(module.validation_seconds) == 4
    after_val = train[every]
    phases = after_val["data_time"] + after_val["compute_time"] + after_val["ckpt_time"]
    assert phases + module.validation_seconds[1] <= after_val["step_time"]
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
    trainer = _pl_trainer(cb, max_steps=max_steps, accumulate_grad_batches=2, limit_val_batches=0,
                          enable_checkpointing=False)  # fmt: skip
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


# ---------------------------------------------------------------------- Transformers


class _RandomTokens(Dataset):
    """Random token ids that are also their own labels (causal LM shifts them itself).

    `pause` seconds per item make reading the set take a noticeable time.
    """

    def __init__(self, n: int, seed: int, pause: float = 0.0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)
        self.pause = pause

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        if self.pause:
            time.sleep(self.pause)
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def test_transformers_trainer_run_reaches_the_spool(tmp_path: Path, spool, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    max_steps, log_every, every, batch = 6, 2, 3, 4
    out = tmp_path / "out"
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=max_steps, logging_steps=log_every,
        eval_strategy="steps", eval_steps=every, save_steps=every,
        per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        learning_rate=1e-3, seed=5, report_to=[], use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    cb = HFCallback(run_dir=str(tmp_path / "run"), job="job-a", register_atexit=False)
    trainer = transformers.Trainer(
        model=transformers.GPT2LMHeadModel(config), args=args,
        train_dataset=_RandomTokens(64, 0), eval_dataset=_RandomTokens(8, 1, pause=0.01),
        callbacks=[cb],
    )  # fmt: skip
    # Each evaluation loop's span on the adapter's own clock (`perf_counter`): the
    # Trainer's `eval_runtime` is timed on the wall clock, which a clock adjustment
    # moves against the other, and by more than the margin compared below.
    loops: list[tuple[float, float]] = []
    evaluation_loop = trainer.evaluation_loop

    def timed_loop(*args: Any, **kwargs: Any) -> Any:
        begun = time.perf_counter()
        try:
            return evaluation_loop(*args, **kwargs)
        finally:
            loops.append((begun, time.perf_counter()))

    monkeypatch.setattr(trainer, "evaluation_loop", timed_loop)
    trainer.train()
    final = trainer.evaluate()
    cb.close()

    (run,) = spool("run")
    assert run["total_steps"] == max_steps and run["seed"] == 5 and run["world_size"] == 1
    assert run["total_epochs"] == 1  # 6 of 16 steps per epoch; not num_train_epochs' 3
    assert run["config"]["learning_rate"] == 1e-3
    train = spool("train")
    assert [r["step"] for r in train] == list(range(log_every, max_steps + 1, log_every))
    assert all(_finite_number(r["loss"]) and r["loss"] > 0 for r in train)
    assert all(_finite_number(r["lr"]) and 0 < r["lr"] <= 1e-3 for r in train)
    assert all(_finite_number(r["grad_norm"]) for r in train)
    assert all(r["extra"]["steps"] == log_every for r in train)
    assert all(r["samples"] == batch * log_every for r in train)
    assert all(r["compute_time"] is not None and r["data_time"] is not None for r in train)
    evals = spool("eval")
    # Two during training, then trainer.evaluate()'s, in the same job.
    assert [e["step"] for e in evals] == [every, 2 * every, max_steps]
    assert all(_finite_number(e["loss"]) for e in evals)
    assert evals[-1]["loss"] == pytest.approx(final["eval_loss"])
    saved = [e for e in spool("event") if e["kind"] == "checkpoint_saved"]
    assert [e["step"] for e in saved] == [every, 2 * every]
    for event in saved:
        path = Path(event["data"]["path"])
        assert path == out / f"checkpoint-{event['step']}" and path.is_dir()
        assert event["data"]["bytes"] == sum(f.stat().st_size for f in path.rglob("*")
                                             if f.is_file())  # fmt: skip
        assert _finite_number(event["data"]["seconds"]) and event["data"]["seconds"] > 0
    # The record at step 4 spans the evaluation and the save at step 3: the save is its
    # ckpt_time, and the evaluation is in its step_time but not in data_time.
    (at_4,) = [r for r in train if r["step"] == 2 * log_every]
    assert at_4["ckpt_time"] == saved[0]["data"]["seconds"]
    # The loop runs between the step's end and the Trainer's log of its metrics: apart
    # from every phase timed, so the phases and it fit in the step time.
    phases = at_4["data_time"] + at_4["compute_time"] + at_4["ckpt_time"]
    begun, ended = loops[0]
    assert phases + (ended - begun) <= at_4["step_time"] + 1e-4  # rounded


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
