"""When an alert an agent raised is over, from what happened after it.

An agent raises an alert once, when it sees the fault, and never takes it back: what
ends it is read from the recording since (the operator's starts, stops, pauses, a host
taken out of the job, the job's steps). Pure: `cockpit.read.agent_alerts` reads those
facts from the store, `cockpit.analysis.alerts.stored_alerts` applies them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from agent.wire import launch_reasons
from agent.wire.events import JOB_EXITED, JOB_STARTED, PAUSE, RELAUNCH
from cockpit.analysis.lifecycle import event_data, paused

Row = Mapping[str, Any]

# Agent alerts that say a job is down for good: true until the job starts again.
ENDED_BY_A_START = frozenset({"recovery_stopped"})
# ... or until the host that raised it starts its part again: the other hosts of the
# same launch start beside (and often after) a host whose launch failed. The start-up
# faults the agent reads from torchrun's output (agent.job.startup_faults) are of that
# launch: a relaunch with the endpoint, port or environment fixed ends them.
ENDED_BY_ITS_HOSTS_START = frozenset({"launch_failed", "rdzv_unresolvable",
                                      "rdzv_unreachable", "port_in_use", "import_error"})


# ... and those about a start that failed (the launch, or a start-up fault read from
# torchrun's output) are also over once that host's part of the job made a step after
# it (a restart by the agent's own recovery got through: the job trains), or once the
# operator stopped or paused the job, or took that host out of it (a relaunch without
# it, a scale-down): the start is then no longer pending, and an alert kept for it
# would stand for ever beside a job that trains or that the operator ended.
ENDED_BY_A_STEP = ENDED_BY_ITS_HOSTS_START


@dataclasses.dataclass(frozen=True)
class AlertEnds:
    """What the operator did after an agent's alert that can end it: each job's newest
    start (`started`) and each (job, host)'s (`started_on`), by the operator, not by the
    agents' recovery; each job's newest stop or pause by the operator (`stopped`); the
    newest time each (job, host) was taken out of its job (`left`)."""

    started: Mapping[str, float]
    started_on: Mapping[tuple[str, str], float]
    stopped: Mapping[str, float]
    left: Mapping[tuple[str, str], float]

    def over(self, row: Row) -> bool:
        """Whether the agent's alert `row` is over by what the operator did since."""
        code, at = row.get("code"), float(row.get("ts") or 0.0)
        job, host = row.get("job") or "", row.get("host") or ""
        if code in ENDED_BY_A_START and self.started.get(job, at) > at:
            return True
        if code in ENDED_BY_ITS_HOSTS_START and self.started_on.get((job, host), at) > at:
            return True
        return code in ENDED_BY_A_STEP and (
            self.stopped.get(job, at) > at or self.left.get((job, host), at) > at)


def alert_mark(row: Row) -> tuple[str, str, float]:
    """(job, host, ts): which alert a step after it is looked for (`awaiting_a_step`)."""
    return row.get("job") or "", row.get("host") or "", float(row.get("ts") or 0.0)


def awaiting_a_step(rows: Iterable[Row], ends: AlertEnds) -> list[tuple[str, str, float]]:
    """(job, host, ts) of each agent alert about a failed start that nothing the operator
    did has ended: whether that host's part stepped since is what still decides it (a
    store read, so asked only for these)."""
    return sorted({alert_mark(r) for r in rows
                   if r.get("code") in ENDED_BY_A_STEP and not ends.over(r)})


# The lifecycle events `operator_ends` reads.
ENDING_EVENT_KINDS = (JOB_STARTED, JOB_EXITED, PAUSE, RELAUNCH)


def operator_ends(events: Iterable[Row]) -> AlertEnds:
    """What the operator did, from the jobs' lifecycle events (`ENDING_EVENT_KINDS`): a
    start is a `job_started` not by the agents' own recovery (a launch, resume,
    relaunch or fork); a stop is a `job_exited` the operator's stop ended (on the host
    it was sent to or on a peer that followed it), a pause one that took effect; a host
    left its job when a relaunch excluded it or a scale-down ended its part."""
    started: dict[str, float] = {}
    started_on: dict[tuple[str, str], float] = {}
    stopped: dict[str, float] = {}
    left: dict[tuple[str, str], float] = {}

    def note(into: dict[Any, float], key: Any, ts: float) -> None:
        into[key] = max(into.get(key, ts), ts)

    for e in events:
        job, kind, ts = e.get("job"), e.get("kind"), float(e.get("ts") or 0.0)
        if not job:
            continue
        on = (job, str(e.get("host") or ""))
        data = event_data(e)
        if kind == JOB_STARTED and data.get("reason") != launch_reasons.RECOVERY:
            note(started, job, ts)
            note(started_on, on, ts)
        elif (kind == JOB_EXITED and data.get("ended_for") == launch_reasons.FOR_STOP) or paused(e):
            note(stopped, job, ts)
        elif (kind == RELAUNCH and data.get("excluded") is True) or (
                kind == JOB_EXITED and data.get("ended_for") == launch_reasons.FOR_SCALE):
            note(left, on, ts)
    return AlertEnds(started, started_on, stopped, left)
