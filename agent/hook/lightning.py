"""Lightning adapter: `trainer = Trainer(callbacks=[CockpitCallback()])`.

Maps Lightning's hooks onto the Reporter: every optimizer step becomes a `train` record
with the loss of its accumulation cycle, the LR the first optimizer stepped with, the
cycle's batch sizes summed as `samples`, and the time between steps split into `data`
(from the end of the previous step, validation or checkpoint to this batch's start) and
`compute` (batch start -> batch end, summed over the cycle); `on_validation_end` becomes
an `eval` record from `trainer.callback_metrics`; each checkpoint file written becomes a
`checkpoint_saved` event.

Lightning's hooks see the loss and the LR at awkward moments, which is why this module
does not simply read them at `on_train_batch_end`: the loss handed to it is divided by
`accumulate_grad_batches` and covers one micro-batch, and step-interval LR schedulers
have already advanced. The adapter therefore sums the cycle's losses (rescaled for a
short final cycle) and reads the LR in `on_before_optimizer_step`.

Lightning calls `on_save_checkpoint` while it *builds* the checkpoint, before the file
is written, so the event is sent at the next hook, once the file exists: the adapter
lists the checkpoint callbacks' folders when the save starts and again then, and reports
every file that appeared or changed, with the time from the save's start to the file's
modification as `seconds` (also added to the step's `ckpt_time`).

Lightning (`lightning.pytorch`, else `pytorch_lightning`) is imported only when
`CockpitCallback` is first used, never when this module is imported.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.hook.lazy_callback import lazy_callback
from agent.hook.lazy_values import to_number
from agent.hook.reporter import Reporter

# path -> (mtime_ns, size) of the regular files in one folder
_Listing = Dict[str, Tuple[int, int]]


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


class CycleLoss:
    """The mean loss of one accumulation cycle, computed when the Reporter reads it.

    Lightning hands each micro-batch's loss divided by `accumulate_grad_batches`; summing
    the parts gives the cycle's mean, and `scale` corrects a final cycle that is shorter
    than the others. Reading is deferred (`item()`, called off the training thread) so
    the hot path adds no tensor operation.
    """

    __slots__ = ("parts", "scale")

    def __init__(self, parts: List[Any], scale: float) -> None:
        self.parts = parts
        self.scale = scale

    def item(self) -> Optional[float]:
        total = 0.0
        for part in self.parts:
            value = to_number(part)
            if value is None:
                return None
            total += value
        return total * self.scale


def _listing(folder: str) -> Optional[_Listing]:
    """The folder's regular files (links excluded: `save_last="link"` writes no data)."""
    found: _Listing = {}
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return found  # not created yet: every file in it later is new
    except OSError:
        return None  # not a local folder (an object store URL...): cannot be watched
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found[entry.path] = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            pass
    return found


class _PendingSave:
    """A checkpoint Lightning is building: its step, start time and the folders before."""

    __slots__ = ("before", "started_perf", "started_wall", "step")

    def __init__(self, step: int, folders: List[str]) -> None:
        self.step = step
        self.started_wall = time.time()
        self.started_perf = time.perf_counter()
        self.before: Dict[str, _Listing] = {}
        for folder in folders:
            listing = _listing(folder)
            if listing is not None:
                self.before[folder] = listing

    def written(self) -> List[Tuple[str, int, float]]:
        """(path, bytes, mtime) of each file that appeared or changed since, oldest first."""
        files = []
        for folder, before in self.before.items():
            for path, (mtime_ns, size) in (_listing(folder) or {}).items():
                if before.get(path) != (mtime_ns, size):
                    files.append((path, size, mtime_ns / 1e9))
        files.sort(key=lambda f: f[2])
        return files


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
        # Where the current wait for data began: the end of the previous step, or of
        # the validation or checkpoint that followed it (those are not data loading).
        self._data_from: Optional[float] = None
        self._cycle_losses: List[Any] = []
        self._cycle_samples: Optional[int] = 0
        self._cycle_start_step: Optional[int] = None
        self._cycle_lr: Optional[float] = None
        self._pending_save: Optional[_PendingSave] = None

    @property
    def reporter(self) -> Reporter:
        if self._reporter is None:
            raise RuntimeError("the Reporter is created in setup(); no trainer has started yet")
        return self._reporter

    # Lightning starts its worker processes after the callback is built, so the
    # Reporter (one per rank) is created here, in the rank's own process. It is kept
    # across stages (fit, then validate...) so that they all land in the same job.
    def setup(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        if self._reporter is None:
            kwargs = dict(self._reporter_kwargs)
            kwargs.setdefault("rank", getattr(trainer, "global_rank", None))
            kwargs.setdefault("world_size", getattr(trainer, "world_size", None))
            self._reporter = Reporter(**kwargs)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._batch_start = self._data_from = None
        self._cycle_losses = []
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
        if self._data_from is not None:
            self.reporter.phase_time("data", max(0.0, now - self._data_from))
        if not self._cycle_losses:
            self._cycle_start_step = getattr(trainer, "global_step", None)
            self._cycle_lr = None
            self._cycle_samples = 0
        self._batch_start = now

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        optimizers = getattr(trainer, "optimizers", None) or []
        if optimizers and optimizer is optimizers[0]:
            self._cycle_lr = _group_lr(optimizer)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        rep = self.reporter
        if self._batch_start is not None:
            rep.phase_time("compute", now - self._batch_start)
        self._data_from = now
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self._cycle_losses.append(loss)
        size = batch_size(batch)
        if size is None or self._cycle_samples is None:
            self._cycle_samples = None  # one batch of unknown size: the cycle's is unknown
        else:
            self._cycle_samples += size
        step = getattr(trainer, "global_step", batch_idx)
        if step == self._cycle_start_step:
            return  # the optimizer has not stepped yet: keep adding phase time
        losses, self._cycle_losses = self._cycle_losses, []
        rep.step(
            step,
            loss=_cycle_loss(losses, trainer, pl_module),
            lr=self._cycle_lr if self._cycle_lr is not None else _first_lr(trainer),
            samples=self._cycle_samples,
            epoch=getattr(trainer, "current_epoch", None),
        )

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        if self._data_from is not None:
            self._data_from = time.perf_counter()
        if getattr(trainer, "sanity_checking", False):
            return
        if not getattr(trainer, "is_global_zero", True):
            return
        metrics = dict(getattr(trainer, "callback_metrics", {}) or {})
        loss = metrics.pop(self.val_loss_key, None)
        others = {k: v for k, v in metrics.items() if k.startswith("val")}
        self.reporter.eval(getattr(trainer, "global_step", 0), loss=loss, **others)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Dict[str, Any]) -> None:
        if self._pending_save is None:  # a second file of the same save keeps the first start
            self._pending_save = _PendingSave(
                int(getattr(trainer, "global_step", 0)), _checkpoint_folders(trainer)
            )

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        self.reporter.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        self._confirm_checkpoint(trainer)
        if self._reporter is not None:
            self._reporter.flush()

    def close(self) -> None:
        """Close the Reporter this callback created (it is also closed at exit)."""
        if self._owns_reporter and self._reporter is not None:
            self._reporter.close()
            self._reporter = None

    def _confirm_checkpoint(self, trainer: Any) -> None:
        pending, self._pending_save = self._pending_save, None
        if pending is None or self._reporter is None:
            return
        written = pending.written()
        if written:
            # The save runs on every rank; the files and their events are rank 0's.
            previous = pending.started_wall
            for path, size, mtime in written:
                seconds = max(0.0, mtime - previous)
                previous = max(previous, mtime)
                if getattr(trainer, "is_global_zero", True):
                    self._reporter.checkpoint_saved(path, pending.step, seconds, bytes=size)
            total = max(0.0, previous - pending.started_wall)
            self._reporter.phase_time("checkpoint", total)
            if self._data_from is not None:
                self._data_from = max(self._data_from, pending.started_perf + total)
            return
        if not getattr(trainer, "is_global_zero", True):
            return
        # Files not visible to this process (a remote store, a save outside the
        # checkpoint callbacks' folders): name what the ModelCheckpoint last reported.
        callback = getattr(trainer, "checkpoint_callback", None)
        path = ""
        for attr in ("last_model_path", "best_model_path"):
            candidate = getattr(callback, attr, "") or ""
            if candidate and os.path.exists(candidate):
                path = candidate
                break
        self._reporter.checkpoint_saved(path or "(unknown path)", pending.step, None)


def _checkpoint_folders(trainer: Any) -> List[str]:
    callbacks = getattr(trainer, "checkpoint_callbacks", None)
    if callbacks is None:
        single = getattr(trainer, "checkpoint_callback", None)
        callbacks = [] if single is None else [single]
    folders = []
    for callback in callbacks:
        folder = getattr(callback, "dirpath", None)
        if isinstance(folder, (str, os.PathLike)) and str(folder) not in folders:
            folders.append(str(folder))
    return folders


def _cycle_loss(losses: List[Any], trainer: Any, pl_module: Any) -> Any:
    """The cycle's mean loss: automatic optimization divided each part by the cycle length."""
    accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
    if not getattr(pl_module, "automatic_optimization", True):
        accumulate = 1  # manual optimization hands the training_step's loss unchanged
    if any(loss is None for loss in losses):
        return None  # a skipped training_step (returned None) has no loss
    if len(losses) == 1 and accumulate == 1:
        return losses[0]
    return CycleLoss(losses, accumulate / len(losses))


def _group_lr(optimizer: Any) -> Optional[float]:
    try:
        return optimizer.param_groups[0]["lr"]
    except (IndexError, KeyError, AttributeError, TypeError):
        return None


def _first_lr(trainer: Any) -> Optional[float]:
    optimizers = getattr(trainer, "optimizers", None) or []
    return _group_lr(optimizers[0]) if optimizers else None


def __getattr__(name: str) -> Any:
    """Build `CockpitCallback` on first use, so that importing this module stays cheap."""
    return lazy_callback(name, globals(), CockpitLightningHooks, _callback_base,
                         "Lightning callback reporting to the cockpit (see module docs).")
