"""This host's GPU faults across runs: the XIDs and uncorrectable ECC errors its GPUs
raised, kept in the agent's state dir (`STATE_DIR/gpu_history.json`, agent.wire.paths).

A GPU that faulted in an earlier run often fails the next one in other words: a hang, a
rank killed, a crash with no message. The agent deciding whether this host leaves an
elastic job (agent.job.membership) reads this history, not only the XIDs of the current
attempt; a spare publishes its own (`SHARED/control/JOB.health/HOST.json`), so the host
that claims one takes a spare with a clean record first.

The daemon writes it (each XID from NVML's event thread, each rise of a GPU's lifetime
count of uncorrectable ECC errors from the samples) and the job's thread reads it. It is
bounded: entries older than KEEP_S go, and at most MAX_ENTRIES (the newest) are kept. A
file that is larger than MAX_BYTES or is not what `save` writes is renamed aside
(`gpu_history.json.corrupt-N`) and counted in `set_aside`; the history starts empty and
the daemon goes on.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from agent.wire import atomic, paths

VERSION = 1
KEEP_S = 30 * 86400.0  # s an entry is kept: a month of runs
WINDOW_S = 7 * 86400.0  # s within which a fault makes the host suspect
MAX_ENTRIES = 1000  # entries kept (the newest): a GPU raising XIDs in a loop
MAX_BYTES = 512 * 1024  # a larger file was not written by `save`: it is set aside
MAX_GPUS = 64  # GPUs whose lifetime ECC count is remembered
MAX_JOBS = 4  # job names kept with an entry (the runs it happened in)
MAX_NAME = 64  # characters of a job name or a GPU's uuid kept
MAX_SET_ASIDE = 5  # corrupt files kept beside it (the oldest is replaced)
# XIDs of the application, not of the hardware, in NVIDIA's XID catalogue: a kernel's
# own fault (13, 31), a process killed or hung (43), the cleanup after another XID (45).
APP_XIDS = frozenset((13, 31, 43, 45))
# The kinds of an entry (this file's own words, not event kinds).
XID_ENTRY, ECC_ENTRY = "xid", "ecc"
KINDS = (XID_ENTRY, ECC_ENTRY)


class GpuHistory:
    """The history file of one state dir; `note_*` may be called from any thread."""

    def __init__(self, state_dir: Path) -> None:
        self.path = paths.gpu_history_file(state_dir)
        self.entries: List[dict] = []
        self.ecc_seen: Dict[str, int] = {}  # GPU (uuid, else index) -> lifetime count
        self.set_aside: List[str] = []  # why each unusable file was set aside, and where
        self._lock = threading.Lock()

    def load(self) -> Optional[str]:
        """Read the file; None when it was usable (or absent), else why it was not, after
        renaming it aside."""
        data, why = read_file(self.path)
        if why is None:
            self.entries, self.ecc_seen = data
            return None
        aside = _set_aside(self.path)
        note = "%s%s" % (why, "; set aside as %s" % aside if aside else
                         "; it could not be renamed aside and is overwritten")
        self.set_aside.append(note)
        return note

    def note_xid(self, gpu: int, xid: int, at: float, jobs: Sequence[str] = ()) -> bool:
        """Keep a hardware XID (raises OSError when the file cannot be written); False
        for an application's XID, which says nothing of the GPU."""
        if xid in APP_XIDS:
            return False
        self._add({"at": float(at), "gpu": int(gpu), "kind": XID_ENTRY, "code": int(xid),
                   "jobs": _jobs(jobs)})
        return True

    def note_ecc(self, gpu: int, uuid: Optional[str], lifetime: Any, at: float,
                 jobs: Sequence[str] = ()) -> int:
        """The GPU's lifetime count of uncorrectable ECC errors as sampled: the rise since
        the count last kept is an entry; returns the rise. A GPU first seen sets the
        count the rises are measured from: errors of unknown date (NVML keeps no times)
        would make a host suspect for a window they may lie long before."""
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime < 0:
            return 0
        key = (uuid or "gpu%d" % gpu)[:MAX_NAME]
        with self._lock:
            before = self.ecc_seen.get(key, lifetime)
            if key in self.ecc_seen and lifetime == before:
                return 0
            self.ecc_seen[key] = lifetime
            if len(self.ecc_seen) > MAX_GPUS:
                del self.ecc_seen[next(iter(self.ecc_seen))]
        rise = max(0, lifetime - before)  # a lower count: a new board under this name
        if rise:
            self._add({"at": float(at), "gpu": int(gpu), "kind": ECC_ENTRY, "code": rise,
                       "jobs": _jobs(jobs)})
        else:
            self._save()
        return rise

    def _add(self, entry: dict) -> None:
        with self._lock:
            self.entries.append(entry)
            self.entries = _pruned(self.entries, entry["at"])
        self._save()

    def _save(self) -> None:
        with self._lock:
            text = json.dumps({"v": VERSION, "entries": self.entries,
                               "ecc_seen": self.ecc_seen}, separators=(",", ":"))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(self.path, text)


def read_file(path: Path) -> Tuple[Tuple[List[dict], Dict[str, int]], Optional[str]]:
    """((entries, lifetime ECC counts), None), or why the file is unusable; an absent
    file is an empty history. Entries are checked one by one: an unusable one in a
    usable file is left out, the others kept."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return ([], {}), None
    except OSError as exc:
        return ([], {}), "unreadable: %s" % exc
    if size > MAX_BYTES:
        return ([], {}), "%d bytes, more than the %d it is kept within" % (size, MAX_BYTES)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return ([], {}), "unreadable: %s" % exc
    if not isinstance(data, dict) or data.get("v") != VERSION or not isinstance(
            data.get("entries"), list):
        return ([], {}), "not a version %d GPU history" % VERSION
    entries = [e for e in (_entry(x) for x in data["entries"][-MAX_ENTRIES:]) if e]
    seen = data.get("ecc_seen")
    counts = {str(k)[:MAX_NAME]: v for k, v in (seen.items() if isinstance(seen, dict) else ())
              if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
    return (entries, dict(list(counts.items())[-MAX_GPUS:])), None


def _entry(raw: Any) -> Optional[dict]:
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        return None
    at, gpu, code = raw.get("at"), raw.get("gpu"), raw.get("code")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (gpu, code)):
        return None
    jobs = raw.get("jobs")
    return {"at": float(at), "gpu": gpu, "kind": raw["kind"], "code": code,
            "jobs": _jobs(str(j) for j in jobs) if isinstance(jobs, list) else []}


def _jobs(names: Iterable[str]) -> List[str]:
    """The job names kept with an entry: bounded, so that MAX_ENTRIES of them stay well
    within MAX_BYTES."""
    return sorted({n[:MAX_NAME] for n in names})[:MAX_JOBS]


def _pruned(entries: List[dict], now: float) -> List[dict]:
    return [e for e in entries if e["at"] >= now - KEEP_S][-MAX_ENTRIES:]


def _set_aside(path: Path) -> Optional[str]:
    """Rename the unusable file to the first free `.corrupt-N` (the oldest of
    MAX_SET_ASIDE replaced when all are taken); None when it cannot be renamed."""
    names = [path.with_name("%s.corrupt-%d" % (path.name, n)) for n in range(MAX_SET_ASIDE)]
    free = [p for p in names if not p.exists()]
    target = free[0] if free else min(names, key=_mtime)
    try:
        os.replace(str(path), str(target))
    except OSError:
        return None
    return str(target)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def summary(entries: Sequence[dict], now: float, window: float = WINDOW_S) -> dict:
    """The faults within `window` before `now`: {"faults", "xids" (code: count), "ecc"
    (errors), "gpus", "jobs" (the runs they happened in), "last", "window"}."""
    recent = [e for e in entries if now - window <= e["at"] <= now + 60.0]
    xids: Dict[str, int] = {}
    for e in recent:
        if e["kind"] == XID_ENTRY:
            xids[str(e["code"])] = xids.get(str(e["code"]), 0) + 1
    return {"faults": len(recent), "xids": xids,
            "ecc": sum(e["code"] for e in recent if e["kind"] == ECC_ENTRY),
            "gpus": sorted({e["gpu"] for e in recent}),
            "jobs": sorted({j for e in recent for j in e.get("jobs") or []}),
            "last": max((e["at"] for e in recent), default=None), "window": window}


def read_summary(state_dir: Path, now: float, window: float = WINDOW_S) -> dict:
    """`summary` of the history file as it is now (an unusable file: no faults known;
    the daemon sets it aside when it loads)."""
    (entries, _seen), _why = read_file(paths.gpu_history_file(state_dir))
    return summary(entries, now, window)


def describe(found: dict) -> str:
    """"GPU 2 raised XID 79 (x2), 48; 3 uncorrectable ECC errors, in the last 7 d"."""
    parts = []
    if found["xids"]:
        parts.append("XID %s" % ", ".join(
            code + (" (x%d)" % n if n > 1 else "") for code, n in sorted(found["xids"].items())))
    if found["ecc"]:
        parts.append("%d uncorrectable ECC error(s)" % found["ecc"])
    gpus = found["gpus"]
    return "GPU%s %s raised %s in the last %s" % (
        "s" if len(gpus) > 1 else "", ", ".join(str(g) for g in gpus), "; ".join(parts),
        "%g d" % (found["window"] / 86400.0) if found["window"] >= 86400
        else "%g s" % found["window"])
