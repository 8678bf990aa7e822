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
so `data_time` starts at the last of those hooks, not at the step's end: an evaluation
is not a wait for data. The time from the previous hook to `on_save` is the save's
duration: it is sent as the event's `seconds` and added to the next record's
`ckpt_time`.

The Reporter is created at the first hook that needs one and kept after `on_train_end`
(flushed, not closed), so that a `trainer.evaluate()` after training reaches the same
job; it is closed at exit, or by `close()`.

`transformers` is imported only when `CockpitCallback` is first used.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, Optional

from agent.hook.lazy_callback import lazy_callback
from agent.hook.reporter import Reporter


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


class CockpitHFHooks:
    """The hook logic; `CockpitCallback` combines it with `transformers.TrainerCallback`."""

    def __init__(
        self, reporter: Optional[Reporter] = None, declare: bool = True, **reporter_kwargs: Any
    ) -> None:
        self._reporter = reporter
        self._owns_reporter = reporter is None
        self._reporter_kwargs = reporter_kwargs
        self._declare = declare
        self._step_begin: Optional[float] = None
        self._last_end: Optional[float] = None
        self._steps_since_report = 0

    @property
    def reporter(self) -> Reporter:
        if self._reporter is None:
            raise RuntimeError("the Reporter is created at the Trainer's first hook; none ran yet")
        return self._reporter

    def _ensure_reporter(self, args: Any) -> Reporter:
        # Created in the rank's own process, at its first hook, from the Trainer's view
        # of the rank; kept for later runs and evaluations of the same callback.
        if self._reporter is None:
            kwargs = dict(self._reporter_kwargs)
            kwargs.setdefault("rank", getattr(args, "process_index", None))
            kwargs.setdefault("world_size", getattr(args, "world_size", None))
            self._reporter = Reporter(**kwargs)
        return self._reporter

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rep = self._ensure_reporter(args)
        self._step_begin = self._last_end = None
        self._steps_since_report = 0
        if self._declare and getattr(state, "is_world_process_zero", True):
            # The state's count is the one the Trainer runs (max_steps overrides the
            # arguments' num_train_epochs); older versions only have the argument.
            epochs = getattr(state, "num_train_epochs", None)
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

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._last_end is not None and self._reporter is not None:
            self._reporter.phase_time("data", now - self._last_end)
        self._step_begin = now

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._step_begin is not None and self._reporter is not None:
            self._reporter.phase_time("compute", now - self._step_begin)
        self._last_end = now
        self._steps_since_report += 1

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        if self._last_end is not None:
            self._last_end = time.perf_counter()  # logging is not a wait for data
        logs = logs or {}
        if "loss" not in logs:
            return  # eval and end-of-training summaries are reported elsewhere
        steps = max(1, self._steps_since_report)
        self._steps_since_report = 0
        per_step = getattr(args, "per_device_train_batch_size", None)
        accumulate = getattr(args, "gradient_accumulation_steps", 1) or 1
        samples = per_step * accumulate * steps if _number(per_step) else None
        known = ("loss", "learning_rate", "grad_norm", "epoch")
        extra = {k: v for k, v in logs.items() if k not in known and _number(v)}
        extra["steps"] = steps
        self._ensure_reporter(args).step(
            getattr(state, "global_step", 0),
            loss=logs.get("loss"),
            lr=logs.get("learning_rate"),
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
        now = time.perf_counter()
        rep = self._ensure_reporter(args)
        seconds = None
        if self._last_end is not None:
            # Everything since the step's end, its log and its evaluation is the save.
            seconds = max(0.0, now - self._last_end)
            rep.phase_time("checkpoint", seconds)
            self._last_end = now
        if not getattr(state, "is_world_process_zero", True):
            return
        step = getattr(state, "global_step", 0)
        path = os.path.join(str(getattr(args, "output_dir", ".")), "checkpoint-%d" % step)
        rep.checkpoint_saved(path, step, seconds, bytes=_directory_bytes(path))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_begin = self._last_end = None
        if self._reporter is not None:
            self._reporter.flush()

    def close(self) -> None:
        """Close the Reporter this callback created (it is also closed at exit)."""
        if self._owns_reporter and self._reporter is not None:
            self._reporter.close()
            self._reporter = None


def __getattr__(name: str) -> Any:
    """Build `CockpitCallback` on first use, so that importing this module stays cheap."""
    return lazy_callback(name, globals(), CockpitHFHooks, _callback_base,
                         "Transformers callback reporting to the cockpit (see module docs).")
