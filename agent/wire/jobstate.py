"""What a managed job leaves in the agent's state dir, so a restarted agent can adopt it.

A job outlives its agent (`agent.job.jobwrap`): after a `kill -9`, a crash or an upgrade
of the daemon, torchrun and its ranks train on. The restarted daemon must then know
which jobs were its own, which processes they are (pids with their start times, so a
recycled pid is never mistaken for the job), and where their bookkeeping stood: the
spec and overrides, the attempt, the restart budget used, the failure awaiting a
restart, the hang detector's step times, the operations it acknowledged and had not yet
carried out (`pending_ops`). `STATE_DIR/jobs/NAME.json` holds that,
rewritten atomically whenever it changes (and every second while the job trains);
`STATE_DIR/command.json` holds the identity of the `run -- CMD` job.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from agent.wire import atomic, ops, paths

DIR = paths.JOBS
VERSION = 1


def path(state_dir: Path, name: str) -> Path:
    return paths.jobs_dir(state_dir) / ("%s.json" % name)


def save(state_dir: Path, name: str, data: dict) -> None:
    write(path(state_dir, name), data)


def write(target: Path, data: dict) -> None:
    """Replace `target` atomically: a reader (or a daemon killed mid-write) never sees
    half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(target, json.dumps(dict(data, v=VERSION), separators=(",", ":"),
                                         default=str))


def read(target: Path) -> Optional[dict]:
    """A file `write` wrote, None when missing, unreadable or of another version."""
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("v") == VERSION else None


def load_all(state_dir: Path) -> List[Tuple[Path, Union[dict, str]]]:
    """Every saved job: (file, its state), or (file, why it cannot be read)."""
    found: List[Tuple[Path, Union[dict, str]]] = []
    folder = Path(state_dir) / DIR
    try:
        names = sorted(os.listdir(str(folder)))
    except FileNotFoundError:
        return found
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        file = folder / name
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            found.append((file, "unreadable: %s" % exc))
            continue
        if not isinstance(data, dict) or data.get("v") != VERSION:
            found.append((file, "not a version %d job state" % VERSION))
            continue
        found.append((file, data))
    return found


# -- operations accepted but not yet carried out -----------------------------------------
# An operation is acknowledged when it is queued to the job's thread, and carried out
# after. A stop, a pause or a thaw the operator was told is under way must not vanish
# with an agent killed in between: the job's state keeps them (`pending_ops`) until they
# are done, and the adopting agent carries them out (agent.job.managed).
PENDING_ACTIONS = (ops.STOP, ops.PAUSE, ops.THAW)  # named by their op (agent.wire.ops)
MAX_PENDING = len(PENDING_ACTIONS)  # one of each: a second stop or pause adds nothing
MAX_OP_ID = 200  # characters of an operator's op id kept with its operation
_FLAGS = ("freeze", "follow")
_SECONDS = {"grace": 0.0, "hold": None, "timeout": None}  # key: least value (None: > 0)
_ARGS = {ops.STOP: ("grace", "id"), ops.PAUSE: ("id", "freeze", "follow", "hold", "timeout"),
         ops.THAW: ("id",)}


def pending_out(accepted: Sequence[dict]) -> List[dict]:
    """What the job's state keeps of the operations accepted and not yet done, oldest
    first: the first of each action (a later one repeats it), MAX_PENDING at most."""
    out: List[dict] = []
    for entry in accepted:
        if entry.get("action") in PENDING_ACTIONS and all(
                e["action"] != entry["action"] for e in out):
            args = dict(entry.get("args") or {})
            if "id" in args and not _usable_id(args["id"]):
                args["id"] = None  # the operation still counts; its id cannot be kept
            out.append({"action": entry["action"], "args": args, "at": entry.get("at")})
    return out[:MAX_PENDING]


def pending_in(saved: Any) -> Tuple[List[dict], List[str]]:
    """The saved `pending_ops`, each checked as an operator's op would be: (the usable
    ones, oldest first, as `pending_out` wrote them; why each other one is dropped). A
    state written before they were kept has none."""
    if saved is None:
        return [], []
    if not isinstance(saved, list):
        return [], ["pending_ops is %s, not a list" % type(saved).__name__]
    kept: List[dict] = []
    dropped: List[str] = []
    if len(saved) > MAX_PENDING:
        dropped.append("%d pending operations saved, %d at most: the first %d are read"
                       % (len(saved), MAX_PENDING, MAX_PENDING))
    for raw in saved[:MAX_PENDING]:
        entry, why = _pending_entry(raw)
        if entry is None:
            dropped.append(why)
        elif any(e["action"] == entry["action"] for e in kept):
            dropped.append("a second pending %s" % entry["action"])
        else:
            kept.append(entry)
    return kept, dropped


def _pending_entry(raw: Any) -> Tuple[Optional[dict], str]:
    if not isinstance(raw, dict) or raw.get("action") not in PENDING_ACTIONS:
        return None, "not a pending %s" % "/".join(PENDING_ACTIONS)
    action = raw["action"]
    args = raw.get("args")
    if not isinstance(args, dict):
        return None, "pending %s without its arguments" % action
    at = raw.get("at")
    out: Dict[str, Any] = {}
    for key, value in args.items():
        if key not in _ARGS[action]:
            return None, "pending %s with an unknown argument %r" % (action, str(key)[:40])
        if key == "id":
            if not _usable_id(value):
                return None, "pending %s with an unusable op id" % action
        elif key in _FLAGS:
            if not isinstance(value, bool):
                return None, "pending %s: %s is not true or false" % (action, key)
        elif not _seconds(value, _SECONDS[key]):
            return None, "pending %s: %s is not a usable number of seconds" % (action, key)
        out[key] = value
    return {"action": action, "args": out,
            "at": float(at) if isinstance(at, (int, float)) and not isinstance(at, bool)
            else None}, ""


def _seconds(value: Any, least: Optional[float]) -> bool:
    """A finite number of seconds >= `least` (None: > 0), as the daemon checks an op's."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        return False
    return value > 0 if least is None else value >= least


def _usable_id(value: Any) -> bool:
    return value is None or (isinstance(value, (str, int)) and not isinstance(value, bool)
                             and len(str(value)) <= MAX_OP_ID)
