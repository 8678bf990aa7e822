"""Which events belong on the loss chart: what was done to the run, and at which step.

A W&B user annotates a curve by hand ("lowered LR here", "resumed after the crash");
here the events already say it. Two kinds are kept:

- an operator's adjustment of a lasting knob (`lr_scale`, a user knob), as the trainer
  acknowledged it, at the step it took effect; one-shot requests (`checkpoint_now`,
  `eval_now`) change nothing in the curve and are left out;
- a restart from a checkpoint (crash recovery, resume after a pause, relaunch), at the
  step the trainer resumed from: where the curve picks up again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.wire.events import CONTROL_ACK, RESUMED
from agent.wire.knobs import ONE_SHOT_KNOBS
from cockpit.analysis.lifecycle import dict_field
from cockpit.snapshot import Marker

MARKER_KINDS = (CONTROL_ACK, RESUMED)  # the event kinds markers come from
# A marker's `kind`: a restart from a checkpoint, an operator's adjustment of a knob.
RESTART = "restart"
ADJUST = "adjust"
MARKER_LIMIT = 200  # markers kept per job, newest


def _knobs(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The knobs an acknowledgement applied: from its data, or (recordings made before
    the data carried them) from its message, `applied a=1, b=2`."""
    data = dict_field(event, "data")
    if isinstance(data.get("knobs"), dict):
        return data["knobs"]
    msg = str(event.get("msg") or "")
    if not msg.startswith("applied "):
        return None
    pairs = (part.partition("=") for part in msg[len("applied "):].split(", "))
    return {name.strip(): value for name, _, value in pairs if name.strip()}


def marker_of(event: Mapping[str, Any]) -> Marker | None:
    step = event.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    kind = event.get("kind")
    if kind == RESUMED:
        return Marker(step, RESTART, str(event.get("msg") or "resumed"))
    if kind != CONTROL_ACK or event.get("rank") is None:
        return None  # the agent's own acks say an op was sent, not when it took effect
    data = dict_field(event, "data")
    if data.get("ok") is False:
        return None
    knobs = _knobs(event)
    lasting = {k: v for k, v in (knobs or {}).items() if k not in ONE_SHOT_KNOBS}
    if not lasting:
        return None
    return Marker(step, ADJUST, ", ".join(f"{k}={v}" for k, v in sorted(lasting.items())))


def chart_markers(events: Iterable[Mapping[str, Any]],
                  held: Iterable[Marker] = ()) -> tuple[Marker, ...]:
    """The markers of `events` (any order, any kind) added to `held`: by step, each
    once, at most `MARKER_LIMIT` (the latest steps)."""
    found = {*held, *(m for m in map(marker_of, events) if m is not None)}
    return tuple(sorted(found, key=lambda m: (m.step, m.kind, m.text))[-MARKER_LIMIT:])


def knob_in_force(markers: Iterable[Marker], name: str) -> str | None:
    """The value of knob `name` the trainer last acknowledged (as written in its marker),
    or None when the operator never set it: what a prompt to change it shows first."""
    found = None
    for marker in markers:  # by step: the newest applied last
        if marker.kind != ADJUST:
            continue
        for pair in marker.text.split(", "):
            key, _, value = pair.partition("=")
            if key == name:
                found = value
    return found
