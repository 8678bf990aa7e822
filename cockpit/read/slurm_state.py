"""A Slurm job's life as its recording tells it: submissions, queue waits, exit states.

The cockpit records what Slurm says about a job as events of a pseudo host
`slurm:NAME` (cockpit/control/slurm.py). The screen and the report read them back
here, so a replay or a report shows what the live screen showed: which Slurm job is
current, whether it waits in the queue (Slurm's reason and estimate), on which nodes
it ran, how long it queued, and how Slurm says it ended (from `sacct` where accounting
exists, else `scontrol show job`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.wire import states
from agent.wire.events import (
    INTERRUPTION,
    PAUSE,
    RELAUNCH,
    RESUME,
    SLURM_FINISHED,
    SLURM_NODE_UNAVAILABLE,
    SLURM_PENDING,
    SLURM_RUNNING,
    SLURM_SUBMITTED,
)
from cockpit.analysis.lifecycle import event_data
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_base import of_kinds

SLURM_KINDS = (SLURM_SUBMITTED, SLURM_PENDING, SLURM_RUNNING, SLURM_FINISHED,
               SLURM_NODE_UNAVAILABLE, INTERRUPTION, PAUSE, RESUME, RELAUNCH)
HOST_PREFIX = "slurm:"
# Agent-side states a queued Slurm job shows instead: nothing of it runs yet.
NOT_YET = frozenset({states.UNKNOWN, states.STARTING})


def slurm_host(job: str) -> str:
    return HOST_PREFIX + job


def slurm_summary(reader: StoreReader, job: str | None,
                  until_ts: float | None = None) -> dict[str, Any] | None:
    """`job`'s Slurm submissions (oldest first) and the current one, or None when the
    job did not go through Slurm."""
    if job is None:
        return None
    host = slurm_host(job)
    events = [e for e in reader.rare_events(SLURM_KINDS, job, until_ts)
              if e.get("host") == host]
    if not events:
        return None
    subs: dict[str, dict[str, Any]] = {}
    causes: list[dict[str, Any]] = []
    for e in events:
        data = event_data(e)
        job_id = data.get("slurm_job_id")
        if not isinstance(job_id, str):
            continue
        sub = subs.setdefault(job_id, {"job_id": job_id, "state": "SUBMITTED",
                                       "submitted": e["ts"]})
        _apply(sub, e["kind"], data, float(e["ts"]))
        if e["kind"] in (INTERRUPTION, SLURM_NODE_UNAVAILABLE):
            causes.append({"ts": e["ts"], "job_id": job_id, "kind": e["kind"],
                           "cause": data.get("cause") or data.get("node_state"),
                           "msg": e.get("msg") or ""})
    if not subs:
        return None
    ordered = sorted(subs.values(), key=lambda s: s["submitted"])
    waits = [s["queue_wait"] for s in ordered if isinstance(s.get("queue_wait"), int | float)]
    return {"current": ordered[-1], "submissions": ordered,
            "queue_wait_s": sum(waits) if waits else None, "causes": causes}


def _apply(sub: dict[str, Any], kind: str, data: Mapping[str, Any], ts: float) -> None:
    """One event into its submission's summary."""
    for key in ("partition", "reason", "estimate", "exit_code", "exit_source", "exclude"):
        value = data.get(key)
        if value not in (None, "", []):
            sub[key] = value
    if kind == SLURM_SUBMITTED:
        sub["submitted"] = ts
        sub["resume"] = bool(data.get("resume"))
    elif kind in (SLURM_PENDING, SLURM_RUNNING, SLURM_FINISHED):
        if isinstance(data.get("state"), str):
            sub["state"] = data["state"]
        if kind == SLURM_RUNNING:
            sub["started"] = ts
            sub["restarts"] = data.get("restarts")
        if kind == SLURM_FINISHED:
            sub["ended"] = ts
        if data.get("nodes"):
            sub["nodes"] = data["nodes"]
        if isinstance(data.get("queue_wait"), int | float):
            sub["queue_wait"] = float(data["queue_wait"])
        if isinstance(data.get("elapsed"), int | float):
            sub["elapsed"] = float(data["elapsed"])
    elif kind == INTERRUPTION and data.get("cause") == "slurm_requeue":
        sub["requeues"] = int(data.get("restarts") or 0)


def queued_state(summary: Mapping[str, Any] | None, agent_state: str) -> str | None:
    """The job's state on the screen while Slurm holds it in the queue ("queued: Slurm's
    reason, its start estimate"), or None when the agents' state stands."""
    if summary is None:
        return None
    cur = summary["current"]
    # Pending (a new submission, or Slurm's requeue of a started one): nothing runs.
    if cur["state"] in ("PENDING", "SUBMITTED"):
        words = [w for w in (cur.get("reason"), f"expected start {cur['estimate']}"
                             if cur.get("estimate") else None) if w]
        return f"queued in Slurm (job {cur['job_id']}" + (
            f": {', '.join(words)})" if words else ")")
    if agent_state in NOT_YET and "ended" in cur:
        return f"ended in Slurm: {cur['state']}"
    return None


def slurm_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's Slurm rows: the current submission, the queue wait, the causes."""
    cur = summary["current"]
    exit_text = cur.get("exit_code") or "n/a"
    if cur.get("exit_source"):
        exit_text += f" (from {cur['exit_source']})"
    rows = [("Slurm job", cur["job_id"] + (
                f" ({len(summary['submissions'])} submissions: "
                f"{', '.join(s['job_id'] for s in summary['submissions'])})"
                if len(summary["submissions"]) > 1 else "")),
            ("partition", str(cur.get("partition") or "n/a")),
            ("nodes", str(cur.get("nodes") or "n/a")),
            ("Slurm state", cur["state"] + (f" ({cur['reason']})" if cur.get("reason")
                                            and cur["reason"] != "None" else "")),
            ("exit code", exit_text)]
    if isinstance(cur.get("elapsed"), int | float):
        rows.append(("elapsed", f"{cur['elapsed']:.0f} s (Slurm's start to end)"))
    if summary["queue_wait_s"] is not None:
        waits = ", ".join(f"{s['job_id']} {s['queue_wait']:.0f} s"
                          for s in summary["submissions"] if "queue_wait" in s)
        rows.append(("queue wait", f"{summary['queue_wait_s']:.0f} s ({waits})"))
    if cur.get("exclude"):
        rows.append(("excluded nodes", ", ".join(map(str, cur["exclude"]))))
    for c in summary["causes"]:
        rows.append((f"{c['kind'].replace('_', ' ')} ({c['job_id']})",
                     f"{c['cause'] or 'n/a'}: {c['msg']}"))
    return rows


def screen_state(reader: StoreReader, job: str | None, until_ts: float | None,
                 fr: Frontiers, agent_state: str) -> str:
    """The job's state as the screen shows it: Slurm's queue while the job waits in it,
    else the agents' state. Re-read when a Slurm event becomes visible."""
    if job is None:
        return agent_state
    version = reader.event_version(f"slurm-summary:{job}", fr, until_ts,
                                   of_kinds(*SLURM_KINDS))
    summary = reader.memo(f"slurm-summary:{job}", (job, until_ts, version),
                          lambda: slurm_summary(reader, job, until_ts))
    return queued_state(summary, agent_state) or agent_state
