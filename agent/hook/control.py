"""Operator adjustments reaching a running trainer through its job's control file.

The agent appends one line per `adjust` op to `RUN_DIR/control/JOB.ndjson`:
`{"id": ..., "ts": ..., "knobs": {...}}`. The Reporter reads new complete lines (a cheap
size check first), applies them at a step boundary and acknowledges each one.

Knobs: `lr_scale` (a positive finite float the trainer multiplies its LR by),
`checkpoint_now` / `eval_now` (one-shot requests the trainer takes with
`take_request`), and any other name, kept in `knobs` for the trainer to read.

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

ONE_SHOT_KNOBS = ("checkpoint_now", "eval_now")


def control_path(run_dir: str, job: str) -> str:
    return os.path.join(run_dir, "control", job + ".ndjson")


def acked_path(control_file: str) -> str:
    """The ledger of `control_file`'s acknowledged lines, beside it (shared like it)."""
    return control_file[: -len(".ndjson")] + ".acked.json"


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
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({"lines": int(lines)}) + "\n")
    os.replace(tmp, path)


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
