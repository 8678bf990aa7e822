"""What a managed job leaves in the agent's state dir, so a restarted agent can adopt it.

A job outlives its agent (`agent.job.jobwrap`): after a `kill -9`, a crash or an upgrade
of the daemon, torchrun and its ranks train on. The restarted daemon must then know
which jobs were its own, which processes they are (pids with their start times, so a
recycled pid is never mistaken for the job), and where their bookkeeping stood: the
spec and overrides, the attempt, the restart budget used, the failure awaiting a
restart, the hang detector's step times. `STATE_DIR/jobs/NAME.json` holds that,
rewritten atomically whenever it changes (and every second while the job trains);
`STATE_DIR/command.json` holds the identity of the `run -- CMD` job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional, Tuple, Union

from agent.wire import atomic, paths

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
