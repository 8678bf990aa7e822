"""Hugging Face Transformers adapter: `Trainer(..., callbacks=[CockpitCallback()])`.

The Trainer exposes the loss only in its periodic logs, so one `train` record is written
per `on_log` that carries a loss (every `logging_steps` optimizer steps). Its
`step_time`, `data_time` (previous step end -> step begin) and `compute_time` (step
begin -> step end) cover all the steps since the previous record; `extra.steps` says how
many, and `samples` counts this rank's samples over them. `on_evaluate` becomes an `eval`
record (`eval_loss` as the loss, other `eval_*` metrics without the prefix), `on_save`
a `checkpoint_saved` event for `OUTPUT_DIR/checkpoint-STEP` (the Trainer calls it once
the checkpoint is written).

After each step the Trainer logs, evaluates and saves before it fetches the next batch,
so `data_time` starts at the end of the last of those hooks, not at the step's end: an
evaluation is not a wait for data, and neither is the making of a record (the wait
starts after it, so no instant is in both a record's step time and the next one's data
time). The time from the previous hook to `on_save` is the save's
duration: it is sent as the event's `seconds` and added to the next record's
`ckpt_time`.

Operator controls (agreed across ranks every `control_every` optimizer steps by rank 0,
see `agent.hook.agreement`; acknowledged by rank 0 once done):

- `lr_scale`: every param group's LR is multiplied right before the optimizer steps and
  put back right after, before the scheduler steps (a chainable scheduler would
  otherwise compound the factor); the records carry the LR the optimizer used;
- `checkpoint_now`: `control.should_save` on every rank at the agreed step; the Trainer
  saves `checkpoint-N/` and `on_save` marks it complete (`NAME.done`, after a barrier so
  that every rank's files are written), which is what the agent's pause waits for;
- `eval_now`: `control.should_evaluate`; refused when the Trainer has no evaluation set
  up (`eval_strategy="no"`);
- any other knob is refused.

Resume: the agent restarts a job with `COCKPIT_RESUME_FROM` set to the checkpoint
folder. The Trainer loads a checkpoint only inside `train()`, before any callback runs,
so the script passes it: `trainer.train(resume_from_checkpoint=resume_checkpoint())`
(`agent.hook.resume_checkpoint`). A run that starts at a step past 0 sends `resumed`;
one the agent restarted that still starts at 0 says the line is missing.

The Reporter is created at the first hook that needs one and kept after `on_train_end`
(flushed, not closed), so that a `trainer.evaluate()` after training reaches the same
job; it is closed at exit, or by `close()`.

`transformers` is imported only when `CockpitCallback` is first used.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Dict, List, Optional

from agent.hook.agreement import agree, barrier, decides
from agent.hook.lazy_callback import lazy_callback
from agent.hook.reporter import Reporter
from agent.wire.checkpoints import CHECKPOINT_DIR_ENV, mark_complete


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:
        return object
    return TrainerCallback


def _directory_bytes(path: str) -> Optional[int]:
    if not os.path.isdir(path):
        return None
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


HONOURED = ("lr_scale", "checkpoint_now", "eval_now")
ADAPTER = "the Hugging Face Trainer callback"
CONTROL_EVERY = 10  # optimizer steps between two agreements of a multi-rank job
RESUME_LINE = "trainer.train(resume_from_checkpoint=resume_checkpoint())"


class CockpitHFHooks:
    """The hook logic; `CockpitCallback` combines it with `transformers.TrainerCallback`.

    `control_every`: optimizer steps between two agreements on the operator's controls
    (a tiny broadcast from rank 0, hence a device sync under NCCL); by default every step
    for a single process, every `CONTROL_EVERY` steps for several.
    """

    def __init__(
        self, reporter: Optional[Reporter] = None, declare: bool = True,
        control_every: Optional[int] = None, **reporter_kwargs: Any,
    ) -> None:  # fmt: skip
        if control_every is not None and (isinstance(control_every, bool) or not isinstance(
                control_every, int) or control_every < 1):
            raise ValueError("control_every must be a whole number of steps >= 1")
        self._reporter = reporter
        self._owns_reporter = reporter is None
        self._reporter_kwargs = reporter_kwargs
        self._declare = declare
        self._control_every = control_every
        self._step_begin: Optional[float] = None
        self._last_end: Optional[float] = None
        self._steps_since_report = 0
        self._lr_scale = 1.0
        self._unscaled: Optional[List[Any]] = None  # the scheduler's LRs, while scaled
        self._used_lr: Optional[float] = None  # the LR the optimizer last stepped with

    @property
    def reporter(self) -> Reporter:
        if self._reporter is None:
            raise RuntimeError("the Reporter is created at the Trainer's first hook; none ran yet")
        return self._reporter

    def _ensure_reporter(self, args: Any) -> Reporter:
        # Created in the rank's own process, at its first hook, from the Trainer's view
        # of the rank; kept for later runs and evaluations of the same callback. Only
        # the rank that decides on controls reads them (agent.hook.agreement).
        if self._reporter is None:
            kwargs = dict(self._reporter_kwargs)
            rank = getattr(args, "process_index", None)
            kwargs.setdefault("rank", rank)
            kwargs.setdefault("world_size", getattr(args, "world_size", None))
            kwargs.setdefault("control", not rank)
            self._reporter = self._take_over(Reporter(**kwargs), args)
        return self._reporter

    def _take_over(self, rep: Reporter, args: Any) -> Reporter:
        """Controls are applied only where the ranks agree (`_agree`), never by the
        Reporter's `step()` at a log in between, and only those this callback honours."""
        rep.control_every = None
        rep.honour_controls(self._honoured(args), ADAPTER)
        return rep

    @staticmethod
    def _honoured(args: Any) -> List[str]:
        # eval_now is refused, with its reason, where the Trainer cannot evaluate (_agree).
        return list(HONOURED)

    def _every(self, args: Any) -> int:
        if self._control_every is not None:
            return self._control_every
        world = getattr(args, "world_size", 1)
        return 1 if not isinstance(world, int) or world <= 1 else CONTROL_EVERY

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rep = self._ensure_reporter(args)
        if not self._owns_reporter:
            self._take_over(rep, args)
        self._step_begin = self._last_end = None
        self._steps_since_report = 0
        self._unscaled = None
        zero = getattr(state, "is_world_process_zero", True)
        if self._declare and zero:
            # The state's count is the one the Trainer runs (max_steps overrides the
            # arguments' num_train_epochs); older versions only have the argument.
            epochs: Any = getattr(state, "num_train_epochs", None)
            if not _number(epochs) or epochs <= 0:
                epochs = getattr(args, "num_train_epochs", None)
            to_dict = getattr(args, "to_dict", None)
            rep.declare(
                total_steps=getattr(state, "max_steps", None) or None,
                total_epochs=math.ceil(epochs) if _number(epochs) else None,
                config=to_dict() if callable(to_dict) else None,
                seed=getattr(args, "seed", None),
                world_size=getattr(args, "world_size", None),
            )
        step = getattr(state, "global_step", 0) or 0
        if zero:
            self._say_where_it_starts(rep, args, step)
        # A knob restored from the control file (set before a restart) is in force from
        # the first step on every rank.
        self._agree(args, state, control, step)

    def _say_where_it_starts(self, rep: Reporter, args: Any, step: int) -> None:
        from agent.hook.reporter import resume_checkpoint

        given = resume_checkpoint()
        if step > 0:
            rep.resumed(step, given or getattr(args, "resume_from_checkpoint", None))
        elif given:
            _tell(rep, "the agent restarted this job from %s, but the Trainer starts at step "
                       "0: pass it to train(), `%s`" % (given, RESUME_LINE))
        ckpt_dir = os.environ.get(CHECKPOINT_DIR_ENV)
        out = getattr(args, "output_dir", None)
        if ckpt_dir and out and os.path.realpath(ckpt_dir) != os.path.realpath(str(out)):
            _tell(rep, "the Trainer saves under output_dir=%s, but the agent looks for "
                       "checkpoints in %s: pauses and restarts will not find them; set "
                       "output_dir=os.environ[%r]" % (out, ckpt_dir, CHECKPOINT_DIR_ENV))

    def _agree(self, args: Any, state: Any, control: Any, step: int) -> None:
        refuse = None
        if not _can_evaluate(args):
            refuse = {"eval_now": "the Trainer has no evaluation set up (eval_strategy="
                                  "'no'): give it an eval_dataset and an eval_strategy"}
        agreed = agree(self._reporter if decides() else None, step,
                       device=_broadcast_device(args), refuse=refuse)
        self._lr_scale = agreed.lr_scale
        if control is not None:
            if agreed.checkpoint_now:
                control.should_save = True
            if agreed.eval_now:
                control.should_evaluate = True

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._last_end is not None and self._reporter is not None:
            self._reporter.phase_time("data", now - self._last_end)
        self._step_begin = now
        # The scheduler set this step's LRs at the end of the previous one.
        groups = _param_groups(kwargs.get("optimizer"))
        if groups and self._lr_scale != 1.0 and self._unscaled is None:
            self._unscaled = [g["lr"] for g in groups]
            for g in groups:
                g["lr"] = g["lr"] * self._lr_scale

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        groups = _param_groups(kwargs.get("optimizer"))
        if groups:
            self._used_lr = groups[0]["lr"]
            if self._unscaled is not None and len(self._unscaled) == len(groups):
                for i, g in enumerate(groups):
                    g["lr"] = self._unscaled[i]  # the scheduler steps from its own values
        self._unscaled = None
        if self._reporter is not None:
            # This step trained with the factor agreed before it: now it is in force.
            self._reporter.controls_in_effect(getattr(state, "global_step", 0) + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._step_begin is not None and self._reporter is not None:
            self._reporter.phase_time("compute", now - self._step_begin)
        self._last_end = now
        self._steps_since_report += 1
        step = getattr(state, "global_step", 0) or 0
        if step % self._every(args) == 0:
            self._agree(args, state, control, step)
            self._last_end = time.perf_counter()  # agreeing is not a wait for data

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        try:
            self._log_step(args, state, logs or {})
        finally:
            # Logging is not a wait for data, and the next wait starts after the record
            # (its step time ends at it): begun before, a pause here (a busy host's
            # scheduler) would be in this step's time and in the next one's data time.
            if self._last_end is not None:
                self._last_end = time.perf_counter()

    def _log_step(self, args: Any, state: Any, logs: Dict[str, Any]) -> None:
        if "loss" not in logs:
            return  # eval and end-of-training summaries are reported elsewhere
        steps = max(1, self._steps_since_report)
        self._steps_since_report = 0
        per_step: Any = getattr(args, "per_device_train_batch_size", None)
        accumulate = getattr(args, "gradient_accumulation_steps", 1) or 1
        samples = per_step * accumulate * steps if _number(per_step) else None
        known = ("loss", "learning_rate", "grad_norm", "epoch")
        extra = {k: v for k, v in logs.items() if k not in known and _number(v)}
        extra["steps"] = steps
        # The Trainer logs its scheduler's LR; the optimizer stepped with it times the
        # operator's factor, which is what the chart must show.
        lr = self._used_lr if self._used_lr is not None else logs.get("learning_rate")
        self._ensure_reporter(args).step(
            getattr(state, "global_step", 0),
            loss=logs.get("loss"),
            lr=lr,
            grad_norm=logs.get("grad_norm"),
            samples=samples,
            epoch=logs.get("epoch", getattr(state, "epoch", None)),
            **extra,
        )

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        if self._last_end is not None:
            self._last_end = time.perf_counter()  # evaluating is not a wait for data
        rep = self._ensure_reporter(args)
        if not getattr(state, "is_world_process_zero", True):
            return
        metrics = dict(metrics or {})
        loss = metrics.pop("eval_loss", None)
        others = {
            (k[len("eval_"):] if k.startswith("eval_") else k): v
            for k, v in metrics.items()
            if _number(v)
        }  # fmt: skip
        rep.eval(getattr(state, "global_step", 0), loss=loss, **others)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rep = self._ensure_reporter(args)
        barrier()  # every rank's files (its RNG state, its shards) are written
        now = time.perf_counter()
        seconds = None
        if self._last_end is not None:
            # Everything since the step's end, its log and its evaluation is the save.
            seconds = max(0.0, now - self._last_end)
            rep.phase_time("checkpoint", seconds)
            self._last_end = now
        if not getattr(state, "is_world_process_zero", True):
            return
        step = getattr(state, "global_step", 0)
        # Absolute: the record names the folder wherever it is read (the Trainer's own
        # `output_dir` is often relative to the job's working directory).
        path = os.path.abspath(os.path.join(str(getattr(args, "output_dir", ".")),
                                            "checkpoint-%d" % step))
        size = _directory_bytes(path)
        if size is not None:
            mark_complete(path, step)
        rep.checkpoint_saved(path, step, seconds, bytes=size)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_begin = self._last_end = None
        if self._reporter is not None:
            self._reporter.flush()

    def close(self) -> None:
        """Close the Reporter this callback created (it is also closed at exit)."""
        if self._owns_reporter and self._reporter is not None:
            self._reporter.close()
            self._reporter = None


def _tell(rep: Reporter, text: str) -> None:
    """A set-up mistake, on the job's stderr and in the cockpit's log pane."""
    line = "agent.hook.hf: " + text
    print(line, file=sys.stderr, flush=True)
    rep.log(line, stream="stderr")


def _can_evaluate(args: Any) -> bool:
    """Whether `control.should_evaluate` can work: the Trainer refuses to be built with an
    evaluation strategy and no eval_dataset, so a strategy other than "no" means one."""
    strategy = getattr(args, "eval_strategy", getattr(args, "evaluation_strategy", "no"))
    return str(getattr(strategy, "value", strategy)) != "no"


def _param_groups(optimizer: Any) -> Optional[List[Dict[str, Any]]]:
    groups = getattr(optimizer, "param_groups", None)
    return groups if groups else None


def _broadcast_device(args: Any) -> Any:
    """The rank's own device for an NCCL broadcast (None: let `agree` choose)."""
    device = getattr(args, "device", None)
    return device if getattr(device, "type", None) == "cuda" else None


def __getattr__(name: str) -> Any:
    """Build `CockpitCallback` on first use, so that importing this module stays cheap."""
    return lazy_callback(name, globals(), CockpitHFHooks, _callback_base,
                         "Transformers callback reporting to the cockpit (see module docs).")
