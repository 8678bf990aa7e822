"""Gating a pipeline on a run's health: `cockpit report --fail-if` and the exit status.

Pure functions over the report's own data (`cockpit.read.report.collect`, its JSON form), so
what a CI job gates on is what the report it prints says. The vocabulary is small and
documented (`METRICS`; docs/recordings.md); an expression is `NAME OP NUMBER`, e.g.
`val_loss>2.0` or `gpu_util<0.5`, and names the condition that FAILS the run.

Exit status (`report --help`): 0 healthy; 2 a usage error or a recording that cannot
be read (every cockpit command's); 3 the job failed; 4 a critical alert is active;
5 a `--fail-if` threshold is breached. When several hold, the lowest is returned; every
reason is given on stderr.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.wire import states
from cockpit.analysis.markers import RESTART

EXIT_OK = 0
EXIT_UNUSABLE = 2
EXIT_JOB_FAILED = 3
EXIT_CRITICAL_ALERT = 4
EXIT_THRESHOLD = 5

# Progress states of a job that ended without finishing: its agent gave up ("failed"),
# or its processes exited before its end or with an error ("exited"; a clean end at its
# total is "finished").
FAILED_STATES = (states.FAILED, states.EXITED)

EXIT_CODES_HELP = (
    "exit status: 0 the run is healthy; 2 a usage error, or the recording cannot be "
    "read; 3 the job failed (its agent gave up, or it exited before its end or with an "
    "error); 4 a critical alert is active at the "
    "report's instant; 5 a --fail-if threshold is breached, or its metric is not known. "
    "When several hold, the lowest; each is said on stderr.")


def _get(*keys: str, scale: float = 1.0) -> Callable[[Mapping[str, Any]], float | None]:
    def read(data: Mapping[str, Any]) -> float | None:
        value: Any = data
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) * scale
    return read


def _count(section: str, severity: str | None = None) -> Callable[[Mapping[str, Any]], float]:
    def read(data: Mapping[str, Any]) -> float:
        items = data.get(section) or []
        # An alert's `state` (resolved: over; acknowledged: seen) leaves only "active" ones
        # to count; a section without states (interruptions) counts whole.
        return float(sum(1 for i in items
                         if (not isinstance(i, Mapping) or i.get("state", "active") == "active")
                         and (severity is None or (isinstance(i, Mapping)
                                                   and i.get("severity") == severity))))
    return read


def _restarts(data: Mapping[str, Any]) -> float:
    markers = (data.get("effect") or {}).get("markers") or []
    return float(sum(1 for m in markers if isinstance(m, Mapping) and m.get("kind") == RESTART))


# name -> (what it is, how it is read from the report's data). Fractions are 0..1.
METRICS: dict[str, tuple[str, Callable[[Mapping[str, Any]], float | None]]] = {
    "loss": ("the newest train loss", _get("effect", "last_loss")),
    "val_loss": ("the newest validation loss", _get("effect", "last_val_loss")),
    "best_val_loss": ("the lowest validation loss", _get("effect", "best_val_loss")),
    "lr": ("the newest learning rate", _get("effect", "last_lr")),
    "nonfinite": ("steps with a NaN/Inf loss", _get("effect", "nonfinite_count")),
    "step": ("the newest step", _get("progress", "step")),
    "percent": ("percent of total_steps done (0..100)", _get("progress", "percent")),
    "steps_per_second": ("recent training speed", _get("progress", "steps_per_second")),
    "eta_seconds": ("estimated seconds left", _get("progress", "eta_seconds")),
    "since_last_step": ("seconds since the newest step", _get("progress", "since_last_step")),
    "samples_per_second": ("throughput", _get("efficiency", "samples_per_s")),
    "tokens_per_second": ("throughput", _get("efficiency", "tokens_per_s")),
    "gpu_util": ("mean GPU busy, 0..1", _get("efficiency", "gpu_busy", scale=0.01)),
    "data_wait": ("share of step time waiting for data, 0..1",
                  _get("efficiency", "data_wait_pct", scale=0.01)),
    "comm": ("share of step time in communication, 0..1",
             _get("efficiency", "comm_pct", scale=0.01)),
    "mfu": ("model FLOPs utilisation, 0..1", _get("efficiency", "mfu")),
    "interruptions": ("interruptions (failures) recorded", _count("interruptions")),
    "restarts": ("restarts from a checkpoint (recovery, resume, fork, relaunch)", _restarts),
    "alerts": ("alerts active", _count("alerts")),
    "alerts_critical": ("critical alerts active", _count("alerts", "critical")),
    "alerts_warning": ("warning alerts active", _count("alerts", "warning")),
}

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, "<": operator.lt,
}
_EXPR = re.compile(r"\s*([a-z_]+)\s*(>=|<=|==|!=|>|<)\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*")


class GateError(ValueError):
    """A --fail-if or --at the user gave that cannot be read (says which and why)."""


@dataclass(frozen=True)
class Threshold:
    text: str
    metric: str
    op: str
    value: float

    def breached(self, data: Mapping[str, Any]) -> str | None:
        """Why this threshold fails the run, or None when it holds."""
        actual = METRICS[self.metric][1](data)
        if actual is None or math.isnan(actual):
            return f"--fail-if {self.text!r}: {self.metric} is not known in this recording"
        if OPERATORS[self.op](actual, self.value):
            return f"--fail-if {self.text!r}: {self.metric} is {actual:.6g}"
        return None


def metrics_help() -> str:
    return "; ".join(f"{name}: {what}" for name, (what, _) in METRICS.items())


def parse_threshold(text: str) -> Threshold:
    """`NAME OP NUMBER` (OP one of > >= < <= == !=), the condition that fails the run."""
    match = _EXPR.fullmatch(text)
    if match is None:
        raise GateError(f"--fail-if {text!r} is not METRIC OP NUMBER (e.g. 'val_loss>2.0', "
                        "'gpu_util<0.5'; OP one of > >= < <= == !=)")
    name, op, number = match.groups()
    if name not in METRICS:
        raise GateError(f"--fail-if {text!r}: no metric {name!r}; known: "
                        f"{', '.join(METRICS)}")
    try:
        value = float(number)
    except ValueError:
        raise GateError(f"--fail-if {text!r}: {number!r} is not a number") from None
    if not math.isfinite(value):
        raise GateError(f"--fail-if {text!r}: {number!r} is not a finite number")
    return Threshold(text=text.strip(), metric=name, op=op, value=value)


def verdict(data: Mapping[str, Any], thresholds: Sequence[Threshold]) -> tuple[int, list[str]]:
    """(exit status, the reasons for it) of the report `data` against `thresholds`."""
    reasons: list[tuple[int, str]] = []
    progress = data.get("progress") or {}
    if progress.get("state") in FAILED_STATES:
        note = progress.get("eta_note") or progress.get("state")
        reasons.append((EXIT_JOB_FAILED, f"job {data.get('job')} {note}"))
    critical = [a for a in data.get("alerts") or []
                if isinstance(a, Mapping) and a.get("severity") == "critical"
                and a.get("state", "active") == "active"]
    for alert in critical:
        reasons.append((EXIT_CRITICAL_ALERT, f"critical alert {alert.get('code')}: "
                                             f"{alert.get('what')} ({alert.get('where')})"))
    for t in thresholds:
        why = t.breached(data)
        if why is not None:
            reasons.append((EXIT_THRESHOLD, why))
    if not reasons:
        return EXIT_OK, []
    return min(code for code, _ in reasons), [why for _, why in reasons]


@dataclass(frozen=True)
class At:
    """`--at`: a step, or an instant in epoch seconds, or seconds after the start."""
    step: int | None = None
    ts: float | None = None
    offset: float | None = None


def parse_at(text: str) -> At:
    """STEP (a whole number), +SECONDS (from the recording's first record), or an ISO
    8601 time (local time unless it names its zone, e.g. 2026-12-03T09:00:00Z)."""
    s = text.strip()
    if re.fullmatch(r"\d{1,15}", s):
        return At(step=int(s))
    if re.fullmatch(r"\+\d+(\.\d+)?", s):
        return At(offset=float(s[1:]))
    try:
        when = datetime.fromisoformat(s)
    except ValueError:
        raise GateError(f"--at {text!r} is not a step (e.g. 40000), +SECONDS from the "
                        "start (e.g. +3600) or an ISO 8601 time (e.g. 2026-12-03T09:00, "
                        "2026-12-03T09:00:00Z)") from None
    return At(ts=when.timestamp())  # naive: local time, as the operator reads clocks
