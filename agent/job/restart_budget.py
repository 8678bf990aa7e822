"""The job-wide restart budget: how many times the job may be restarted for one cause
within a window, counted over all its hosts, before it stops and says so.

Each host's agent restarts its own part, so a budget kept per host lets a job that fails
on a different host each time restart without end, and a job whose every host restarts
from one failure spend a host's budget per failure. Here a restart is one *failure of
the job*: the restarts its hosts make within INCIDENT_S of the first, at most one per
host, are one, and take the cause of the first of them (the host that failed first; the
others' NCCL errors are its consequence). The budget per cause (`recovery.per_cause`,
agent.wire.launch_spec) counts those failures within `recovery.window` seconds; the
total (`recovery.restart_budget`) counts them all since the operator's last start.

Every host leaves its restarts in `control/JOB.restarts/HOST.json` in the job's shared
run dir (the dir peer_end's markers live in) and reads the others' when it decides; a
dir that does not answer in time (`peer_end.Shared`) leaves the decision to this host's
own restarts, and the decision says so. Only restarts of the part begun by the same
operator start (its generation) count: a relaunch gets a fresh budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from agent.wire import atomic, paths

INCIDENT_S = 60.0  # s within which the hosts' restarts are one failure of the job
MAX_KEPT = 1000  # restarts kept per host (the oldest go first)


def restarts_file(shared_dir: Path, job: str, host: str) -> Path:
    return paths.restarts_dir(shared_dir, job) / ("%s.json" % host)


def read_others(shared_dir: Path, job: str, host: str) -> List[dict]:
    """The other hosts' restarts, as their files say; a file that cannot be read or is
    not a list of restarts counts for nothing (it is another host's, rewritten whole)."""
    folder = paths.restarts_dir(shared_dir, job)
    try:
        files = sorted(folder.glob("*.json"))
    except OSError:
        return []
    out: List[dict] = []
    for path in files:
        if path.stem == host:
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, list):
            out.extend(e for e in (_valid(x, path.stem) for x in data) if e is not None)
    return out


def _valid(entry: Any, host: str) -> Optional[dict]:
    if not isinstance(entry, dict) or not isinstance(entry.get("cause"), str):
        return None
    at = entry.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        return None
    generation = entry.get("generation")
    return {"at": float(at), "cause": entry["cause"], "host": host,
            "generation": generation if isinstance(generation, str) else None}


def write_mine(shared_dir: Path, job: str, host: str, entries: Sequence[dict]
               ) -> Optional[str]:
    """This host's restarts, replaced whole (a reader never sees half); the error, if
    it could not be written (the others then count without them)."""
    path = restarts_file(shared_dir, job, host)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(list(entries)[-MAX_KEPT:]))
    except OSError as exc:
        return "cannot write %s: %s" % (path, exc)
    return None


def failures(entries: Sequence[dict]) -> List[dict]:
    """The job's failures from its hosts' restarts, oldest first: a restart within
    INCIDENT_S of a failure's first one, on a host not yet in it, is part of it. Each is
    {"at", "cause" (its first restart's), "hosts", "entries"}."""
    out: List[dict] = []
    for e in sorted(entries, key=lambda e: e["at"]):
        last = out[-1] if out else None
        if last is not None and e["at"] - last["at"] <= INCIDENT_S and (
                e["host"] not in last["hosts"]):
            last["hosts"].append(e["host"])
            last["entries"].append(e)
            continue
        out.append({"at": e["at"], "cause": e["cause"], "hosts": [e["host"]],
                    "entries": [e]})
    return out


class JobBudget:
    """This host's restarts and the budget they and the other hosts' are held to."""

    def __init__(self, per_cause: Dict[str, int], window: float, total: int,
                 host: str) -> None:
        self.per_cause = dict(per_cause)
        self.window = window
        self.total = total
        self.host = host
        self.mine: List[dict] = []

    def state(self) -> List[dict]:
        return list(self.mine)

    def restore(self, saved: Any) -> None:
        entries = saved if isinstance(saved, list) else []
        self.mine = [e for e in (_valid(x, self.host) for x in entries) if e]

    def started(self) -> None:
        """The operator started this host's part again: its failures before count no
        more, also where the op brought no generation to tell them apart by (an older
        cockpit's or a hand-made op, whose entries all have none)."""
        self.mine = []

    def judge(self, cause: str, at: float, generation: Optional[str], others: Sequence[dict],
              now: float) -> dict:
        """Whether one more restart, of a failure of `cause` at `at`, is within the
        budget, with the figures the cockpit shows: {"cause" (the failure's, which may
        be another host's first), "used", "limit", "window", "total_used",
        "total_limit", "hosts", "spent" (None, or why not)}. `used` counts this one."""
        mine = {"at": at, "cause": cause, "host": self.host, "generation": generation}
        entries = [e for e in (*self.mine, *others, mine) if e["generation"] == generation]
        found = failures(entries)
        this = next(f for f in found if any(e is mine for e in f["entries"]))
        of_cause = [f for f in found if f["cause"] == this["cause"]
                    and f["at"] >= now - self.window]
        limit = self.per_cause.get(this["cause"])
        used, total_used = len(of_cause), len(found)
        spent = None
        if limit is not None and used > limit:
            spent = ("job-wide restart budget for %s spent: %d failure(s) in %s, %d allowed"
                     % (this["cause"], used, _span(self.window), limit))
        elif total_used > self.total:
            spent = ("job-wide restart budget of %d used up (%d failures over hosts %s)"
                     % (self.total, total_used, ", ".join(sorted(
                         {h for f in found for h in f["hosts"]}))))
        return {"cause": this["cause"], "used": used, "limit": limit, "window": self.window,
                "total_used": total_used, "total_limit": self.total,
                "hosts": sorted(this["hosts"]), "spent": spent}

    def record(self, cause: str, at: float, generation: Optional[str]) -> None:
        self.mine.append({"at": at, "cause": cause, "host": self.host,
                          "generation": generation})
        del self.mine[:-MAX_KEPT]


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return "%d h" % (seconds // 3600)
    if seconds % 60 == 0:
        return "%d min" % (seconds // 60)
    return "%g s" % seconds
