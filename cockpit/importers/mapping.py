"""Which metric name means what: the documented rules that map a TensorBoard tag or a
JSONL key onto the cockpit's fields, and the operator's overrides (`--map NAME=FIELD`).

Fields: `loss` (training loss), `val_loss` (validation loss: an `eval` record), `lr`,
`grad_norm`, `epoch`, `samples` and `tokens` (counts per step), `step_time` (seconds),
`ignore` (not imported). A name no rule matches is kept: a validation-looking name
(`val/…`, `eval/…`, `validation/…`, `test/…`) among the eval record's metrics, any other
among the train record's `extra`. The first rule that matches wins; an override beats
every rule. Matching ignores case and treats `/ . - ` and `_` alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

FIELDS = ("loss", "val_loss", "lr", "grad_norm", "epoch", "samples", "tokens", "step_time",
          "ignore")
TRAIN_FIELDS = ("loss", "lr", "grad_norm", "epoch", "samples", "tokens", "step_time")
EXTRA = "extra"  # kept under the train record's `extra`
METRIC = "metric"  # kept under the eval record's `metrics`

RULES: tuple[tuple[str, str], ...] = (
    (r"(val|valid|validation|eval|test)_(loss|loss_epoch|loss_step)", "val_loss"),
    (r"loss_(val|valid|validation|eval|test)", "val_loss"),
    (r"(train|training)_(loss|loss_step|loss_epoch)|loss|loss_train|loss_step|train_loss",
     "loss"),
    (r"(train_)?(lr|learning_rate)(_\w+)?|lr_\w+", "lr"),
    (r"(train_)?grad(ient)?_norm(_\w+)?", "grad_norm"),
    (r"(train_)?epoch", "epoch"),
    (r"(train_)?(step_time|time_per_step|iteration_time)", "step_time"),
)
_COMPILED = tuple((re.compile(rf"^(?:{pattern})$"), field) for pattern, field in RULES)
_EVAL_PREFIX = re.compile(r"^(val|valid|validation|eval|test)_")
_SEP = re.compile(r"[/.\- ]+")


class MappingError(ValueError):
    """A bad `--map` override; the message names it."""


def normal(name: str) -> str:
    return _SEP.sub("_", name.strip().lower())


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`["eval/ppl=val_loss", "throughput=ignore"]` -> {normalised name: field}."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, field = item.rpartition("=")
        if not sep or not name.strip():
            raise MappingError(f"--map {item!r}: expected NAME=FIELD")
        if field not in FIELDS:
            raise MappingError(f"--map {item!r}: FIELD must be one of {', '.join(FIELDS)}")
        out[normal(name)] = field
    return out


def field_for(name: str, overrides: Mapping[str, str] | None = None) -> str:
    """The field `name` maps to: one of FIELDS, EXTRA or METRIC."""
    key = normal(name)
    if overrides and key in overrides:
        return overrides[key]
    for pattern, field in _COMPILED:
        if pattern.match(key):
            return field
    return METRIC if _EVAL_PREFIX.match(key) else EXTRA
