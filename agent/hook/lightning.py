"""Lightning adapter: `trainer = Trainer(callbacks=[CockpitCallback()])`.

Maps Lightning's hooks onto the Reporter: every optimizer step (`on_train_batch_end`,
once per accumulation cycle) becomes a `train` record with the batch loss, the LR of the
first optimizer, the batch size as `samples`, and the time between batches split into
`data` (batch end -> next batch start) and `compute` (batch start -> batch end);
`on_validation_end` becomes an `eval` record from `trainer.callback_metrics`; a
checkpoint becomes a `checkpoint_saved` event.

Lightning calls `on_save_checkpoint` while it *builds* the checkpoint, before the file
is written, so the event is sent at the next hook, once the file exists, with the path
the ModelCheckpoint callback reports; the save duration is not observable from a
callback and is sent as null.

Lightning (`lightning.pytorch`, else `pytorch_lightning`) is imported only when
`CockpitCallback` is first used, never when this module is imported.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

from agent.hook.reporter import Reporter


def _callback_base() -> type:
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        try:
            from pytorch_lightning.callbacks import Callback
        except ImportError:
            return object
    return Callback


def batch_size(batch: Any) -> Optional[int]:
    """Leading dimension of the first tensor-like found in a batch, if any."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()), None)
    elif isinstance(batch, (list, tuple)):
        batch = batch[0] if batch else None
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return None


class CockpitLightningHooks:
    """The hook logic; `CockpitCallback` combines it with Lightning's `Callback` base."""

    def __init__(
        self,
        reporter: Optional[Reporter] = None,
        val_loss_key: str = "val_loss",
        declare: bool = True,
        **reporter_kwargs: Any,
    ) -> None:
        self._reporter = reporter
        self._owns_reporter = reporter is None
        self._reporter_kwargs = reporter_kwargs
        self.val_loss_key = val_loss_key
        self._declare = declare
        self._batch_start: Optional[float] = None
        self._last_end: Optional[float] = None
        self._pending_ckpt: Optional[int] = None

    @property
    def reporter(self) -> Reporter:
        if self._reporter is None:
            raise RuntimeError("the Reporter is created in setup(); no trainer has started yet")
        return self._reporter

    # Lightning starts its worker processes after the callback is built, so the
    # Reporter (one per rank) is created here, in the rank's own process.
    def setup(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        if self._reporter is None:
            kwargs = dict(self._reporter_kwargs)
            kwargs.setdefault("rank", getattr(trainer, "global_rank", None))
            kwargs.setdefault("world_size", getattr(trainer, "world_size", None))
            self._reporter = Reporter(**kwargs)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not (self._declare and getattr(trainer, "is_global_zero", True)):
            return
        max_steps = getattr(trainer, "max_steps", -1)
        if max_steps is None or max_steps < 0:
            estimated = getattr(trainer, "estimated_stepping_batches", None)
            max_steps = int(estimated) if isinstance(estimated, (int, float)) and (
                estimated != float("inf")
            ) else None  # fmt: skip
        max_epochs = getattr(trainer, "max_epochs", None)
        self.reporter.declare(
            total_steps=max_steps,
            total_epochs=max_epochs if isinstance(max_epochs, int) and max_epochs >= 0 else None,
            world_size=getattr(trainer, "world_size", None),
        )

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        self._confirm_checkpoint(trainer)
        if self._last_end is not None:
            self.reporter.phase_time("data", now - self._last_end)
        self._batch_start = now

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        rep = self.reporter
        if self._batch_start is not None:
            rep.phase_time("compute", now - self._batch_start)
        self._last_end = now
        accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        if (batch_idx + 1) % accumulate:
            return  # the optimizer has not stepped yet: keep adding phase time
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        rep.step(
            getattr(trainer, "global_step", batch_idx),
            loss=loss,
            lr=_first_lr(trainer),
            samples=batch_size(batch),
            epoch=getattr(trainer, "current_epoch", None),
        )

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        if getattr(trainer, "sanity_checking", False):
            return
        if not getattr(trainer, "is_global_zero", True):
            return
        metrics = dict(getattr(trainer, "callback_metrics", {}) or {})
        loss = metrics.pop(self.val_loss_key, None)
        others = {k: v for k, v in metrics.items() if k.startswith("val")}
        self.reporter.eval(getattr(trainer, "global_step", 0), loss=loss, **others)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Dict[str, Any]) -> None:
        if getattr(trainer, "is_global_zero", True):
            self._pending_ckpt = int(getattr(trainer, "global_step", 0))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        self.reporter.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        self._confirm_checkpoint(trainer)
        if self._owns_reporter and self._reporter is not None:
            self._reporter.close()
            self._reporter = None

    def _confirm_checkpoint(self, trainer: Any) -> None:
        step, self._pending_ckpt = self._pending_ckpt, None
        if step is None or self._reporter is None:
            return
        callback = getattr(trainer, "checkpoint_callback", None)
        path = ""
        for attr in ("last_model_path", "best_model_path"):
            candidate = getattr(callback, attr, "") or ""
            if candidate and os.path.exists(candidate):
                path = candidate
                break
        self._reporter.checkpoint_saved(path or "(unknown path)", step, None)


def _first_lr(trainer: Any) -> Optional[float]:
    optimizers = getattr(trainer, "optimizers", None) or []
    try:
        return optimizers[0].param_groups[0]["lr"]
    except (IndexError, KeyError, AttributeError, TypeError):
        return None


def __getattr__(name: str) -> Any:
    """Build `CockpitCallback` on first use, so that importing this module stays cheap."""
    if name == "CockpitCallback":
        cls = type(
            "CockpitCallback",
            (CockpitLightningHooks, _callback_base()),
            {"__doc__": "Lightning callback reporting to the cockpit (see module docs).",
             "__module__": __name__},
        )  # fmt: skip
        globals()[name] = cls
        return cls
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
