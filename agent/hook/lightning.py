"""Lightning adapter: `trainer = Trainer(callbacks=[CockpitCallback()])`.

Maps Lightning's hooks onto the Reporter: every optimizer step becomes a `train` record
with the loss of its accumulation cycle, the LR the first optimizer stepped with, the
cycle's batch sizes summed as `samples`, and the time between steps split into `data`
(from the end of the previous step, validation or checkpoint to this batch's start) and
`compute` (batch start -> batch end, summed over the cycle); `on_validation_end` becomes
an `eval` record from `trainer.callback_metrics`; each checkpoint file written becomes a
`checkpoint_saved` event and gets its completion marker (`agent.wire.checkpoints`), which is
what lets the agent restart a job from it.

Resuming: the agent passes the checkpoint to restart from in `COCKPIT_RESUME_FROM`, and
Lightning loads a checkpoint only through `fit`'s argument (no callback hook runs before
it chooses), so the one line a user adds is

    trainer.fit(model, ckpt_path=os.environ.get("COCKPIT_RESUME_FROM"))

The callback then sends `resumed` with the restored step; when the variable is set but
`fit` loaded nothing it raises an alert instead of letting the job silently restart
from step 0. With `COCKPIT_CHECKPOINT_DIR` set (the agent sets it to the job's
checkpoint dir, the only place it looks), `ModelCheckpoint`s given no `dirpath` write
there.

Operator controls, all honoured (see `docs/hooks.md`): `lr_scale` multiplies every
param group's LR inside each optimizer step (`lr_scale.StepLrScaler`: schedulers,
per-step or per-epoch, and saved optimizer states keep the unscaled value); `eval_now`
runs Lightning's validation loop after the current step, where Lightning itself would;
`checkpoint_now` calls `trainer.save_checkpoint` on every rank. On several ranks, rank
0's Reporter alone reads the control file and the ranks agree on the controls at each
optimizer step (every `control_every` steps) with a collective (`agreement.agree`), so
they change their LR, validate and save at the same step. A control that cannot be
carried out (`eval_now` with no validation data, `lr_scale` on an optimizer without step
hooks) is acknowledged refused with the reason.

Lightning's hooks see the loss and the LR at awkward moments, which is why this module
does not simply read them at `on_train_batch_end`: the loss handed to it is divided by
`accumulate_grad_batches` and covers one micro-batch, and step-interval LR schedulers
have already advanced. The adapter therefore sums the cycle's losses (rescaled for a
short final cycle) and takes the LR the optimizer step actually used.

Lightning calls `on_save_checkpoint` while it *builds* the checkpoint, before the file
is written, so the event is sent (and the marker written) at the next hook, once the
file exists: the adapter lists the checkpoint callbacks' folders when the save starts
and again then, and reports every file that appeared or changed, with the time from the
save's start to the file's modification as `seconds` (also added to the step's
`ckpt_time`). A save that raised is never marked. With `AsyncCheckpointIO` the marker is
queued behind the write on the plugin's own writer thread.

Lightning (`lightning.pytorch`, else `pytorch_lightning`) is imported only when
`CockpitCallback` is first used, never when this module is imported. The module is
longer than most because the hook logic for metrics, checkpoints and controls shares one
state machine (the step boundary, the pending save, the agreed controls).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.hook.lazy_callback import lazy_callback
from agent.hook.lazy_values import to_number
from agent.hook.lr_scale import StepLrScaler
from agent.hook.reporter import Reporter
from agent.wire.checkpoints import CHECKPOINT_DIR_ENV, RESUME_ENV, mark_complete

# path -> (mtime_ns, size) of the checkpoint files (and sharded checkpoint folders) in
# one folder; a folder's size is -1 (its mtime changes as shards are added)
_Listing = Dict[str, Tuple[int, int]]

CONTROLS = ("lr_scale", "checkpoint_now", "eval_now")
_WHO = "the Lightning callback"


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
    """The folder's checkpoints: regular files, and folders named `*.ckpt` (a sharded
    save writes one); links are excluded (`save_last="link"` writes no data)."""
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
            elif entry.name.endswith(".ckpt") and entry.is_dir(follow_symlinks=False):
                found[entry.path] = (entry.stat(follow_symlinks=False).st_mtime_ns, -1)
        except OSError:
            pass
    return found


def _is_marker(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith(".done") or name.endswith(".tmp") or name.startswith(".")


def _path_bytes(path: str) -> Optional[int]:
    """A checkpoint's size: the file's, or the sum of a sharded checkpoint folder's files."""
    try:
        if not os.path.isdir(path):
            return os.path.getsize(path)
    except OSError:
        return None
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total


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
                if _is_marker(path):
                    continue
                if before.get(path) != (mtime_ns, size):
                    files.append((path, size, mtime_ns / 1e9))
        files.sort(key=lambda f: f[2])
        return files


def _when_written(trainer: Any, action: Callable[[], None]) -> None:
    """Run `action` once the checkpoint just handed to the strategy is on disk.

    A synchronous save (the default) is complete when `save_checkpoint` returns: the
    action runs now. `AsyncCheckpointIO` writes on a one-thread executor: the action is
    queued behind the write there, and skipped if a write of the plugin failed.
    """
    io = getattr(getattr(trainer, "strategy", None), "checkpoint_io", None)
    executor = getattr(io, "_executor", None)
    if executor is None or not callable(getattr(executor, "submit", None)):
        action()
        return

    def after_write() -> None:
        if getattr(io, "_error", None) is None:
            action()

    executor.submit(after_write)


class CockpitLightningHooks:
    """The hook logic; `CockpitCallback` combines it with Lightning's `Callback` base.

    `checkpoint_dir`: where `checkpoint_now` saves (default: `$COCKPIT_CHECKPOINT_DIR`,
    else the first `ModelCheckpoint`'s folder, else `default_root_dir/checkpoints`).
    `control_every`: the ranks agree on the operator's controls every this many optimizer
    steps (1 by default, so a pause's checkpoint comes at the next step). Each agreement
    is a broadcast of three numbers; under NCCL it also waits for the GPU to catch up, so
    a job with very short steps may want a larger value. Other keyword arguments go to
    the `Reporter`.
    """

    def __init__(
        self,
        reporter: Optional[Reporter] = None,
        val_loss_key: str = "val_loss",
        declare: bool = True,
        checkpoint_dir: Optional[str] = None,
        control_every: int = 1,
        **reporter_kwargs: Any,
    ) -> None:
        if isinstance(control_every, bool) or not isinstance(control_every, int) or (
                control_every < 1):
            raise ValueError("control_every must be a whole number of steps >= 1")
        self._reporter = reporter
        self._owns_reporter = reporter is None
        self._reporter_kwargs = reporter_kwargs
        self.val_loss_key = val_loss_key
        self._declare = declare
        self._checkpoint_dir = checkpoint_dir
        self._control_every = control_every
        self._batch_start: Optional[float] = None
        # Where the current wait for data began: the end of the previous step, or of
        # the validation or checkpoint that followed it (those are not data loading).
        self._data_from: Optional[float] = None
        self._cycle_losses: List[Any] = []
        self._cycle_samples: Optional[int] = 0
        self._cycle_start_step: Optional[int] = None
        self._cycle_lr: Optional[float] = None
        self._pending_save: Optional[_PendingSave] = None
        self._saving_now = False  # our own save: confirmed where it is made
        self._scaler = StepLrScaler(self._optimizer_stepped)
        self._first_optimizer: Any = None
        self._lr_refused: Optional[str] = None  # why lr_scale cannot be applied
        self._eval_asked: Optional[int] = None  # step of an eval_now not yet run
        self._eval_loop: Any = None  # the epoch loop whose validation check is forced

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
            rank = getattr(trainer, "global_rank", None)
            world = getattr(trainer, "world_size", None)
            kwargs.setdefault("rank", rank)
            kwargs.setdefault("world_size", world)
            if isinstance(world, int) and world > 1:
                kwargs.setdefault("control", rank == 0)  # rank 0 decides, all agree
            kwargs.setdefault("control_every", self._control_every)
            self._reporter = Reporter(**kwargs)
        folder = os.environ.get(CHECKPOINT_DIR_ENV)
        if folder and stage in (None, "fit"):
            # Runs before ModelCheckpoint.setup (Lightning puts checkpoint callbacks
            # last), which would otherwise pick a folder the agent never looks in.
            for callback in _checkpoint_callbacks(trainer):
                if hasattr(callback, "dirpath") and callback.dirpath is None:
                    callback.dirpath = folder

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._batch_start = self._data_from = None
        self._cycle_losses = []
        rep = self.reporter
        self._first_optimizer = None
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        self._lr_refused = self._scaler.attach(optimizers)
        if optimizers:
            self._first_optimizer = optimizers[0]
        honoured = [c for c in CONTROLS if c != "lr_scale" or self._lr_refused is None]
        rep.honour_controls(honoured, trainer=_WHO)
        zero = getattr(trainer, "is_global_zero", True)
        step = int(getattr(trainer, "global_step", 0) or 0)
        if zero:
            self._announce_start(trainer, rep, step)
        # The operator's LR scale outlives restarts (rank 0's Reporter restored it):
        # the ranks agree on it before the first step.
        self._agree(trainer, step)

    def _announce_start(self, trainer: Any, rep: Reporter, step: int) -> None:
        if self._declare:
            max_steps = getattr(trainer, "max_steps", -1)
            if max_steps is None or max_steps < 0:
                estimated = getattr(trainer, "estimated_stepping_batches", None)
                max_steps = int(estimated) if isinstance(estimated, (int, float)) and (
                    estimated != float("inf")
                ) else None  # fmt: skip
            max_epochs = getattr(trainer, "max_epochs", None)
            rep.declare(
                total_steps=max_steps,
                total_epochs=max_epochs if isinstance(max_epochs, int) and max_epochs >= 0
                else None,
                world_size=getattr(trainer, "world_size", None),
            )
        loaded = getattr(trainer, "ckpt_path", None)
        asked = os.environ.get(RESUME_ENV)
        if loaded:
            rep.resumed(step, path=str(loaded))
        elif asked:
            what = ("the agent restarted this job from %s (%s), but trainer.fit loaded no "
                    "checkpoint: training starts again from step %d" % (asked, RESUME_ENV, step))
            print("agent.hook.lightning: " + what, file=sys.stderr, flush=True)
            rep.alert("parameter", "resume_not_loaded", what,
                      "pass it to Lightning: trainer.fit(model, ckpt_path=os.environ.get("
                      "\"%s\"))" % RESUME_ENV)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        self._confirm_checkpoint(trainer)
        self._check_eval_ran(trainer)
        if self._data_from is not None:
            self.reporter.phase_time("data", max(0.0, now - self._data_from))
        if not self._cycle_losses:
            self._cycle_start_step = getattr(trainer, "global_step", None)
            self._cycle_lr = None
            self._cycle_samples = 0
        self._batch_start = now

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        # The LR without step hooks; with them, the scaled one is taken when the
        # optimizer steps (after this hook, or before it when the closure runs inside).
        if not self._scaler.attached:
            optimizers = getattr(trainer, "optimizers", None) or []
            if optimizers and optimizer is optimizers[0]:
                self._cycle_lr = _group_lr(optimizer)

    def _optimizer_stepped(self, optimizer: Any, lr: Any) -> None:
        if optimizer is self._first_optimizer:
            self._cycle_lr = lr

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
        if isinstance(step, int) and step % self._control_every == 0:
            self._agree(trainer, step)
        # The next step's wait for data starts after its record (whose step time ends
        # there) and after the agreement, which is not a wait for data: begun at the
        # batch's end, a pause in between would be in this step's time and the next's
        # data time.
        self._data_from = time.perf_counter()

    # ------------------------------------------------------------------ controls

    def _agree(self, trainer: Any, step: int) -> None:
        """Agree on the controls with the other ranks (a collective), then act on them."""
        from agent.hook.agreement import agree

        refuse = {}
        if not getattr(trainer, "enable_validation", False):
            refuse["eval_now"] = ("this trainer has nothing to validate (no val dataloader, "
                                  "no validation_step, or limit_val_batches=0)")
        agreed = agree(self.reporter, step, refuse=refuse)
        self._scaler.scale = agreed.lr_scale if self._lr_refused is None else 1.0
        if agreed.eval_now:
            self._eval_now(trainer, step)
        if agreed.checkpoint_now:
            self._checkpoint_now(trainer, step)

    def _eval_now(self, trainer: Any, step: int) -> None:
        """Have Lightning validate after this step, at the point where it validates anyway.

        The epoch loop decides at each step's end with `_should_check_val_fx`; it is
        answered True once (and the override removed) so that the validation runs
        exactly as a scheduled one would: same loop, same hooks, checkpoint callbacks
        and plateau schedulers included. Acknowledged by the `eval` record it produces.
        """
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if loop is None or not callable(getattr(loop, "_should_check_val_fx", None)):
            if getattr(trainer, "is_global_zero", True):
                self.reporter.refuse_request(
                    "eval_now", "this Lightning version has no fit_loop.epoch_loop."
                    "_should_check_val_fx through which the callback triggers a validation")
            return

        def once(*_args: Any, **_kwargs: Any) -> bool:
            loop.__dict__.pop("_should_check_val_fx", None)
            return True

        loop._should_check_val_fx = once
        self._eval_loop = loop
        self._eval_asked = step

    def _check_eval_ran(self, trainer: Any, final: bool = False) -> None:
        """Refuse an asked validation that Lightning decided not to run after all (it
        skips one right after resuming from a checkpoint saved at that point)."""
        asked, loop = self._eval_asked, self._eval_loop
        if asked is None:
            return
        forced = loop is not None and "_should_check_val_fx" in loop.__dict__
        if forced and not final:
            return  # not consulted yet: the step it follows has not ended
        self._eval_asked = self._eval_loop = None
        if forced:
            loop.__dict__.pop("_should_check_val_fx", None)
        if getattr(trainer, "is_global_zero", True) and self._reporter is not None:
            self._reporter.refuse_request(
                "eval_now", "Lightning did not run the validation asked for after step %d%s"
                % (asked, " (training ended first)" if forced else ""))

    def _checkpoint_now(self, trainer: Any, step: int) -> None:
        """`trainer.save_checkpoint` on every rank (they all got here at this step), then
        the marker and the `checkpoint_saved` event, which acknowledges the request."""
        rep = self.reporter
        zero = getattr(trainer, "is_global_zero", True)
        path = os.path.abspath(os.path.join(self._checkpoint_folder(trainer),
                                            "cockpit-step=%d.ckpt" % step))
        started = time.perf_counter()
        self._saving_now = True
        try:
            trainer.save_checkpoint(path)
        except Exception as exc:
            if zero:
                rep.refuse_request("checkpoint_now", "trainer.save_checkpoint(%r) failed: %s"
                                   % (path, exc))
            raise
        finally:
            self._saving_now = False
        seconds = time.perf_counter() - started
        rep.phase_time("checkpoint", seconds)
        self._data_from = time.perf_counter()
        if zero:
            def done() -> None:
                _mark(rep, path, step)
                rep.checkpoint_saved(path, step, time.perf_counter() - started,
                                     bytes=_path_bytes(path))

            _when_written(trainer, done)

    def _checkpoint_folder(self, trainer: Any) -> str:
        if self._checkpoint_dir:
            return str(self._checkpoint_dir)
        folder = os.environ.get(CHECKPOINT_DIR_ENV)
        if folder:
            return folder
        for callback in _checkpoint_callbacks(trainer):
            dirpath = getattr(callback, "dirpath", None)
            if isinstance(dirpath, (str, os.PathLike)):
                return str(dirpath)
        return os.path.join(str(getattr(trainer, "default_root_dir", ".")), "checkpoints")

    # ------------------------------------------------------------------ other hooks

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        if self._data_from is not None:
            self._data_from = time.perf_counter()
        if getattr(trainer, "sanity_checking", False):
            return
        self._eval_asked = self._eval_loop = None  # ran: its eval record acknowledges it
        if not getattr(trainer, "is_global_zero", True):
            return
        metrics = dict(getattr(trainer, "callback_metrics", {}) or {})
        loss = metrics.pop(self.val_loss_key, None)
        others = {k: v for k, v in metrics.items() if k.startswith("val")}
        self.reporter.eval(getattr(trainer, "global_step", 0), loss=loss, **others)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Dict[str, Any]) -> None:
        if self._saving_now:
            return
        if self._pending_save is None:  # a second file of the same save keeps the first start
            self._pending_save = _PendingSave(
                int(getattr(trainer, "global_step", 0)), _checkpoint_folders(trainer)
            )

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._confirm_checkpoint(trainer)
        self._check_eval_ran(trainer, final=True)
        self._scaler.detach()
        self.reporter.flush()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        # A save the exception interrupted may have left a torn file: never mark it.
        self._pending_save = None
        self._scaler.detach()
        if self._eval_loop is not None:
            self._eval_loop.__dict__.pop("_should_check_val_fx", None)
        self._eval_asked = self._eval_loop = None

    def teardown(self, trainer: Any, pl_module: Any, stage: Optional[str] = None) -> None:
        self._confirm_checkpoint(trainer)
        self._scaler.detach()
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
        rep = self._reporter
        zero = getattr(trainer, "is_global_zero", True)
        written = pending.written()
        if written:
            # The save runs on every rank; the files, markers and events are rank 0's.
            previous = pending.started_wall
            marks = []
            for path, size, mtime in written:
                seconds = max(0.0, mtime - previous)
                previous = max(previous, mtime)
                # Absolute: the record names the file wherever it is read.
                marks.append((os.path.abspath(path), size if size >= 0 else _path_bytes(path),
                              seconds))
            if zero:
                def done() -> None:
                    for path, size, seconds in marks:
                        _mark(rep, path, pending.step)
                        rep.checkpoint_saved(path, pending.step, seconds, bytes=size)

                _when_written(trainer, done)
            total = max(0.0, previous - pending.started_wall)
            rep.phase_time("checkpoint", total)
            if self._data_from is not None:
                self._data_from = max(self._data_from, pending.started_perf + total)
            return
        if not zero:
            return
        # Files not visible to this process (a remote store, a save outside the
        # checkpoint callbacks' folders): name what the ModelCheckpoint last reported.
        # No marker: this process cannot tell that the file is complete.
        callback = getattr(trainer, "checkpoint_callback", None)
        path = ""
        for attr in ("last_model_path", "best_model_path"):
            candidate = getattr(callback, attr, "") or ""
            if candidate and os.path.exists(candidate):
                path = os.path.abspath(candidate)
                break
        rep.checkpoint_saved(path or "(unknown path)", pending.step, None)


def _mark(rep: Reporter, path: str, step: int) -> None:
    """Write the completion marker; a failure is told (the agent will skip the file)."""
    try:
        mark_complete(path, step)
    except (OSError, ValueError) as exc:
        text = ("agent.hook.lightning: no completion marker for %s (the agent will not "
                "restart from it): %s" % (path, exc))
        print(text, file=sys.stderr, flush=True)
        rep.log(text, stream="stderr")


def _checkpoint_callbacks(trainer: Any) -> List[Any]:
    callbacks = getattr(trainer, "checkpoint_callbacks", None)
    if callbacks is None:
        single = getattr(trainer, "checkpoint_callback", None)
        callbacks = [] if single is None else [single]
    return list(callbacks)


def _checkpoint_folders(trainer: Any) -> List[str]:
    folders = []
    for callback in _checkpoint_callbacks(trainer):
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
