"""The operator's LR scale, applied inside `optimizer.step()` and nowhere else.

A framework's LR scheduler owns `param_group["lr"]`: closed-form schedulers (LambdaLR,
OneCycleLR) overwrite it at each step, chainable ones (StepLR, ExponentialLR, LinearLR)
multiply what they find there. Scaling the value once would be undone by the first kind;
scaling it after every scheduler step would compound with the second. So the scale is
put in with a step pre-hook and taken out again by the matching post-hook: the update
uses `lr * scale`, while the scheduler, a checkpoint's optimizer state and anything else
that reads the groups between steps see the schedule's own, unscaled value. This holds
whether the scheduler steps per step or per epoch, and for manual optimization too.

Only torch optimizers (>= 2.0, `register_step_pre_hook`) can be scaled this way; `attach`
says why not otherwise, so the adapter can refuse `lr_scale` instead of pretending.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple


class StepLrScaler:
    """Multiplies every param group's LR by `scale` for the duration of each optimizer step.

    `on_step(optimizer, lr)` is called at each step's start with the LR the first param
    group steps with (scale included): the LR a train record should carry.
    """

    def __init__(self, on_step: Optional[Callable[[Any, Any], None]] = None) -> None:
        self.scale = 1.0
        self.steps_scaled = 0  # optimizer steps taken with a scale other than 1
        self._on_step = on_step
        self._handles: List[Any] = []
        self._saved: Dict[int, List[Tuple[Dict[str, Any], Any]]] = {}

    def attach(self, optimizers: List[Any]) -> Optional[str]:
        """Hook every optimizer; None when done, else why the scale cannot be applied."""
        self.detach()
        for optimizer in optimizers:
            pre = getattr(optimizer, "register_step_pre_hook", None)
            post = getattr(optimizer, "register_step_post_hook", None)
            if not (callable(pre) and callable(post)):
                self.detach()
                return ("the optimizer %s has no step hooks (torch >= 2.0 optimizers have): "
                        "its learning rate cannot be scaled" % type(optimizer).__name__)
            self._handles.append(pre(self._before_step))
            self._handles.append(post(self._after_step))
        return None

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for saved in self._saved.values():  # a step that raised: leave the schedule's LR
            _restore(saved)
        self._saved = {}

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def _before_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        scale = self.scale
        groups = getattr(optimizer, "param_groups", None) or []
        if scale != 1.0:
            saved = []
            for group in groups:
                lr = group.get("lr")
                if lr is not None:
                    saved.append((group, lr))
                    group["lr"] = lr * scale
            self._saved[id(optimizer)] = saved
            self.steps_scaled += 1
        if self._on_step is not None and groups:
            self._on_step(optimizer, groups[0].get("lr"))

    def _after_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        saved = self._saved.pop(id(optimizer), None)
        if saved:
            _restore(saved)


def _restore(saved: List[Tuple[Dict[str, Any], Any]]) -> None:
    for group, lr in saved:
        group["lr"] = lr
