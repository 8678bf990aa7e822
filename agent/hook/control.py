"""Operator adjustments reaching a running trainer through its job's control file.

The agent appends one line per `adjust` op to `RUN_DIR/control/JOB.ndjson`:
`{"id": ..., "ts": ..., "knobs": {...}}`. The Reporter reads new complete lines (a cheap
size check first), applies them at a step boundary and acknowledges each one.

Knobs: `lr_scale` (a positive finite float the trainer multiplies its LR by),
`checkpoint_now` / `eval_now` (one-shot requests the trainer takes with
`take_request`), and any other name, kept in `knobs` for the trainer to read.

An acknowledgement tells the operator what the trainer did, so it is written only once
that is true (`OpenLine`): a lasting knob once a step trained with it, a request once it
was done (the checkpoint saved, the evaluation recorded), and a knob the trainer does not
honour (`split_honoured`) refused with the reason. Acknowledging at the moment a line is
read said "applied" for controls that an adapter then ignored.

When a process starts, the file may already hold lines from an earlier process of the
same job (a restart after a crash): their lasting knobs (`lr_scale`, user knobs) are
restored, since they are the operator's current settings, while their one-shot requests
are stale and dropped.

Whether such a line still needs an acknowledgement depends on whether a process ever
acknowledged it: one written while the job ran was, one written while it was paused or
waiting to restart was not, and without an ack the cockpit never learns the knob is in
force (no chart marker, a prompt showing the configured value). Rank 0 therefore keeps
`control/JOB.acked.json`, the number of leading lines whose acknowledgement reached its
spool; a starting process announces only the lines after it, so a knob set long ago is
not announced again at every restart.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Set, Tuple

from agent.wire import atomic, paths
from agent.wire.knobs import ONE_SHOT_KNOBS
from agent.wire.ops import ADJUST


def control_path(run_dir: str, job: str) -> str:
    return str(paths.control_file(run_dir, job))


def acked_path(control_file: str) -> str:
    """The ledger of `control_file`'s acknowledged lines, beside it (shared like it)."""
    return str(paths.acked_file(control_file))


def read_acked(path: str) -> int:
    """How many leading lines of the control file were acknowledged; 0 when unknown.

    An unreadable or damaged ledger counts as none acknowledged: announcing a knob twice
    costs a redundant chart marker, while missing one hides a setting that is in force.
    """
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return 0
    lines = obj.get("lines") if isinstance(obj, dict) else None
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
        return 0
    return lines


def write_acked(path: str, lines: int) -> None:
    """Record that lines 1..`lines` were acknowledged; replaced whole, so a reader never
    sees half a ledger. Raises OSError."""
    atomic.write_text(path, json.dumps({"lines": int(lines)}) + "\n")


class ControlFile:
    """Reads the control file incrementally: only complete lines, each line once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._identity: Optional[Tuple[int, int]] = None
        self._partial = b""
        self._lineno = 0

    def read_new(self) -> List[Tuple[int, bytes]]:
        """New complete lines since the last call, as (line number, raw bytes)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self._offset:
            # A different file (replaced, or truncated in place): read it from the top.
            self._identity = identity
            self._offset = 0
            self._partial = b""
            self._lineno = 0
        if st.st_size == self._offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        out = []
        for raw in data[:cut].split(b"\n")[:-1]:
            self._lineno += 1
            if raw.strip():
                out.append((self._lineno, raw))
        return out


class ControlError(ValueError):
    """A control line or knob the trainer cannot apply; the message goes into the ack."""

    def __init__(self, message: str, ident: Optional[str] = None) -> None:
        super().__init__(message)
        self.ident = ident


def parse_line(raw: bytes, where: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """(id, knobs) of one control line; `ControlError` naming `where` if it is malformed."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlError("%s: not a JSON line (%s)" % (where, exc)) from None
    if not isinstance(obj, dict):
        raise ControlError("%s: expected a JSON object, got %s" % (where, type(obj).__name__))
    ident = obj.get("id")
    ident = None if ident is None else str(ident)
    knobs = obj.get("knobs")
    if not isinstance(knobs, dict):
        raise ControlError("%s: 'knobs' must be an object, got %r" % (where, knobs), ident)
    return ident, knobs


class ControlState:
    """The trainer-visible result of every control applied so far."""

    def __init__(self) -> None:
        self.lr_scale = 1.0
        self.knobs: Dict[str, Any] = {}
        self.requests: Set[str] = set()

    def apply(self, knobs: Dict[str, Any], *, one_shots: bool = True) -> None:
        """Validate all knobs first, then apply them all: a bad line changes nothing."""
        lr_scale = self.lr_scale
        if "lr_scale" in knobs:
            value = knobs["lr_scale"]
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ControlError("lr_scale must be a positive finite number, got %r" % (value,))
            lr_scale = float(value)
        for name in ONE_SHOT_KNOBS:
            if name in knobs and not isinstance(knobs[name], bool):
                raise ControlError("%s must be true or false, got %r" % (name, knobs[name]))
        self.lr_scale = lr_scale
        for name, value in knobs.items():
            if name in ONE_SHOT_KNOBS:
                if value and one_shots:
                    self.requests.add(name)
                continue
            self.knobs[name] = value
        self.knobs["lr_scale"] = self.lr_scale


def split_honoured(knobs: Dict[str, Any], honoured: Optional[Set[str]], by: str
                   ) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """(the knobs the trainer carries out, {knob: why refused} for the others).

    `honoured` is what the trainer declared it applies (None: it declared nothing, as a
    plain loop reading `lr_scale` and `take_request` itself, so every knob is its own)."""
    if honoured is None:
        return dict(knobs), {}
    accepted = {k: v for k, v in knobs.items() if k in honoured}
    refused = {k: "%s does not apply %s" % (by, k) for k in knobs if k not in honoured}
    return accepted, refused


class OpenLine:
    """One control line between its application and its acknowledgement.

    Its ack is due once every knob is settled: refused at once when the trainer does not
    honour it; a lasting knob (`lr_scale`, a user knob) applied once a step ran with it
    (`in_effect`); a one-shot request once the trainer took it and did it (`done`: the
    checkpoint is saved, the evaluation recorded) or said it cannot (`refuse`).
    """

    __slots__ = (
        "applied",
        "applied_at",
        "at_start",
        "dropped",
        "ident",
        "lasting",
        "lineno",
        "refused",
        "requests",
        "step",
        "taken",
    )

    def __init__(self, ident: Optional[str], lineno: int, accepted: Dict[str, Any],
                 refused: Dict[str, str], applied_at: Any, at_start: bool = False,
                 dropped: Tuple[str, ...] = ()) -> None:
        self.ident = ident
        self.lineno = lineno
        self.applied_at = applied_at  # the step it was applied at; None: before any
        self.applied: Dict[str, Any] = {}
        self.refused = dict(refused)
        self.lasting = {k: v for k, v in accepted.items() if k not in ONE_SHOT_KNOBS}
        self.requests = {k for k, v in accepted.items() if k in ONE_SHOT_KNOBS and v}
        for name in ONE_SHOT_KNOBS:  # a request of `false` asks nothing: nothing to wait on
            if name in accepted and not accepted[name]:
                self.applied[name] = accepted[name]
        self.taken: Set[str] = set()
        self.at_start = at_start
        self.dropped = dropped
        self.step: Any = applied_at

    @property
    def settled(self) -> bool:
        return not self.lasting and not self.requests

    def ack(self) -> Tuple[str, Dict[str, Any]]:
        """(message, data) of this line's `control_ack`: `ok` when anything was applied;
        `refused` names each knob the trainer did not carry out and why."""
        empty = not self.applied and not self.refused  # a line of no knobs asks nothing
        data: Dict[str, Any] = {"id": self.ident, "op": ADJUST,
                                "ok": bool(self.applied) or empty,
                                "applied_step": self.step if self.applied or empty else None}
        if self.at_start:
            data["at_start"] = True
        parts = []
        if self.applied:
            data["knobs"] = dict(self.applied)
            parts.append("applied %s%s" % (
                ", ".join("%s=%s" % kv for kv in sorted(self.applied.items())),
                " (set while the job was not running)" if self.at_start else ""))
        if self.refused:
            data["refused"] = dict(self.refused)
            why = "; ".join("%s: %s" % kv for kv in sorted(self.refused.items()))
            parts.append("refused %s" % why)
            if not self.applied:
                data["error"] = why
        if self.dropped:
            data["dropped"] = list(self.dropped)
            parts.append("%s dropped: a one-shot request is not carried over to a new start"
                         % ", ".join(self.dropped))
        return "; ".join(parts) or "applied nothing: the line has no knobs", data


def _later(step: Any, than: Any) -> bool:
    """Whether `step` comes after `than` (unknown steps: yes, a step ran since)."""
    if than is None:
        return True
    try:
        return bool(step > than)
    except TypeError:
        return True


class OpenLines:
    """The control lines applied and not yet acknowledged, in line order."""

    def __init__(self) -> None:
        self.lines: List[OpenLine] = []
        # How many lines wait for a step to run with their lasting knobs: the hot path
        # (every `Reporter.step`) looks at this number only.
        self.lasting_waiting = 0

    def add(self, line: OpenLine) -> List[OpenLine]:
        """Track `line`; returns it settled already (all refused, or nothing to wait on)."""
        if line.settled:
            return [line]
        self.lines.append(line)
        if line.lasting:
            self.lasting_waiting += 1
        return []

    def in_effect(self, step: Any, only_before: bool = False) -> List[OpenLine]:
        """A step ran with the lasting knobs applied so far (`only_before`: applied at a
        step before `step`, for a record that may be the very step they were applied at)."""
        for line in self.lines:
            if line.lasting and (not only_before or _later(step, line.applied_at)):
                line.applied.update(line.lasting)
                line.lasting = {}
                line.step = step
                self.lasting_waiting -= 1
        return self._settled()

    def taken(self, name: str) -> None:
        for line in self.lines:
            if name in line.requests:
                line.taken.add(name)

    def done(self, name: str, step: Any) -> List[OpenLine]:
        """The trainer did the one-shot `name` it took."""
        for line in self.lines:
            if name in line.taken:
                line.taken.discard(name)
                line.requests.discard(name)
                line.applied[name] = True
                line.step = step
        return self._settled()

    def refuse(self, name: str, why: str, step: Any) -> List[OpenLine]:
        """The trainer cannot do the one-shot `name`: every line asking it is refused."""
        for line in self.lines:
            if name in line.requests:
                line.taken.discard(name)
                line.requests.discard(name)
                line.refused[name] = why
                line.step = step
        return self._settled()

    def _settled(self) -> List[OpenLine]:
        done = [line for line in self.lines if line.settled]
        if done:
            self.lines = [line for line in self.lines if not line.settled]
        return done
