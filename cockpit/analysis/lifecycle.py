"""What a job's lifecycle events say about it, whatever form their `data` was stored in."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agent.wire import launch_reasons, states
from agent.wire.events import (
    INTERRUPTION,
    JOB_ADOPTED,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RELAUNCH,
    RESUME,
)

# Newest lifecycle event kinds after which a job's processes are gone (a pause that
# failed is not one: the job keeps running).
ENDING_KINDS = frozenset({JOB_EXITED, PAUSE})
STOPPED_CAUSE = "stopped on request"
# Job states in which its processes are gone and stay gone until an operator acts: the
# agent's own words and "exited" (it ended early or badly and its agent is not restarting it).
ENDED_STATES = states.IDLE


def event_data(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event's `data` as a dict: stored as JSON text or a dict, {} when neither."""
    data = event.get("data")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    return data if isinstance(data, dict) else {}


def dict_field(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    """`mapping[key]` when it is a dict, else {}: the nested parts of a record (an ack's
    `data`, a diagnosis's `where`) come from hosts and may be missing or malformed."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def paused(event: Mapping[str, Any]) -> bool:
    """A pause (or freeze) that took effect; the agent marks one that failed `ok: false`."""
    return event.get("kind") == PAUSE and event_data(event).get("ok") is not False


def took_effect(event: Mapping[str, Any]) -> bool:
    """Whether a lifecycle event changed the job's state: an operation the agent refused
    or could not carry out (a pause with no checkpoint, a resume of a running job) says
    `ok: false` and leaves the job as the event before it left it."""
    return event_data(event).get("ok") is not False


def newest_in_effect(events: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The newest lifecycle event that took effect (`took_effect`), or None: a pause
    pressed as the job reached its last step fails after the job's exit, and read as
    the newest event it kept a finished job "running"."""
    newest = None
    for event in sorted(events, key=_order):
        if took_effect(event):
            newest = event
    return newest


def newest_per_host(events: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each host's newest lifecycle event that took effect (`took_effect`): what its
    part of the job is doing, as its own agent said last."""
    newest: dict[str, Mapping[str, Any]] = {}
    for event in sorted(events, key=_order):
        if event.get("host") is not None and took_effect(event):
            newest[str(event["host"])] = event
    return newest


def part_runs(event: Mapping[str, Any]) -> bool:
    """Whether a host whose newest lifecycle event in effect is `event` still runs its
    part of the job (or is restarting it): not ended (exited, paused, given up), not
    taken out of it (excluded by a relaunch or from an elastic job), not found ended by
    a restarted agent."""
    data = event_data(event)
    if ended(event) or data.get("exclusion") or data.get("excluded"):
        return False
    return event.get("kind") != JOB_ADOPTED or data.get("running") is True


def parts_still_running(events: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The hosts whose part of the job still runs (`part_runs`), each with its newest
    lifecycle event in effect, from the job's lifecycle events (any host's).

    A job whose newest event is a pause is paused only when this is empty: a pause that
    failed on one host ("pause failed … it keeps running", `ok: false`) leaves that
    host's part running while rank 0's host paused. A host that said nothing since the
    job's newest relaunch is not counted: the relaunch restarted the job without it (an
    excluded host that is down tells nothing more), nor one that said nothing since an
    end that speaks for every host (`for_every_host`: a Slurm pause ended the whole
    allocation, each node's agent with it)."""
    events = sorted(events, key=_order)
    said_last = {str(e.get("host")): _order(e) for e in events}
    relaunched = max((_order(e) for e in events
                      if e.get("kind") == RELAUNCH and took_effect(e)), default=None)
    swept = max((_order(e) for e in events
                 if for_every_host(e) and took_effect(e) and ended(e)), default=None)
    return {host: event for host, event in newest_per_host(events).items()
            if part_runs(event) and (relaunched is None or said_last[host] >= relaunched)
            and (swept is None or said_last[host] > swept)}


def for_every_host(event: Mapping[str, Any]) -> bool:
    """Whether `event` speaks for every host of the job at once: the scheduler's (a Slurm
    job's events carry its job id, `cockpit.control.slurm`), whose pause ended the whole
    allocation, whatever each node's agent said last before it went."""
    return event_data(event).get("slurm_job_id") is not None


PARTLY_PAUSED = "partly paused"


def partly_paused_note(running: Iterable[str]) -> str:
    """"partly paused: gpu2 still running": the note beside the state of a job some of
    whose hosts paused while the others' parts run (`parts_still_running`)."""
    hosts = sorted(running)
    return f"{PARTLY_PAUSED}: {', '.join(hosts)} still running"


def is_partly_paused(note: str | None) -> bool:
    """Whether a state's note (`Progress.eta_note`) says the job is partly paused."""
    return note is not None and PARTLY_PAUSED in note


def ended(event: Mapping[str, Any] | None) -> bool:
    """Whether the job's processes stopped with this event (it exited or was paused, or
    failed and its agent is not restarting it)."""
    if event is not None and gave_up(event):
        return True
    if event is None or event.get("kind") not in ENDING_KINDS:
        return False
    return event.get("kind") == JOB_EXITED or paused(event)


def exit_reading(events: Iterable[Mapping[str, Any]],
                 percent: float | None) -> tuple[str, str]:
    """(state, note) of a job whose newest lifecycle event is an exit, from each host's
    newest event and how far the job got (`percent`, 0..1, None: no known total).

    The state and the reason beside it come from one place, so that no pane nor the
    report reads "exited" beside "done" for one job: a job that ran to its end and
    exited cleanly on every host is "finished"; an exit with an error, a signal or a
    stop says which, so that a failure never reads as a finished job.
    """
    newest: dict[str, Mapping[str, Any]] = {}
    for event in sorted(events, key=_order):
        if took_effect(event):  # a pause that failed after the exit changed nothing
            newest[str(event.get("host"))] = event
    exits = sorted((e for e in newest.values() if e.get("kind") == JOB_EXITED), key=_order)
    early = percent is not None and percent < 1.0
    troubled = [e for e in exits if not _clean_exit(e)]
    causes = [cause for cause in map(_exit_cause, troubled) if cause]
    if causes:  # the first host to end badly says why the job ended
        # The operator's stop is the agent's "stopped", whatever step it ended at.
        return (states.STOPPED if causes[0] == STOPPED_CAUSE else states.EXITED), causes[0]
    if early:
        return states.EXITED, "exited before its end"
    if troubled or not exits:
        return states.EXITED, "exited, its exit status unknown"
    return states.FINISHED, "finished"


def current_run_started(events: Iterable[Mapping[str, Any]]) -> float | None:
    """When the job's current run started, from its `job_started` and `job_exited`
    events (any host's); None when no start is known.

    Every start (a recovery, a relaunch, a resume) begins a run of its own, and it is
    the one whose figures the panes show: its first launch may lie days back. On several
    hosts the run began with the first of their newest starts (the others joined its
    rendezvous), counting only the hosts still running it (one that left an elastic
    job keeps an older start), or every host once none runs.
    """
    newest_start: dict[str, float] = {}
    running: dict[str, bool] = {}
    for event in sorted(events, key=_order):
        host, kind = str(event.get("host")), event.get("kind")
        if kind == JOB_STARTED:
            newest_start[host] = float(event.get("ts") or 0.0)
            running[host] = True
        elif kind == JOB_EXITED:
            running[host] = False
    if not newest_start:
        return None
    now_running = [ts for host, ts in newest_start.items() if running.get(host)]
    return min(now_running or newest_start.values())


def _order(event: Mapping[str, Any]) -> tuple[float, int]:
    return float(event.get("ts") or 0.0), int(event.get("seq") or 0)


def _clean_exit(event: Mapping[str, Any]) -> bool:
    """Exit code 0, and not an attempt the agent ended itself (a stop, a relaunch…)."""
    data = event_data(event)
    return data.get("returncode") == 0 and not data.get("ended_for")


def _exit_cause(event: Mapping[str, Any]) -> str | None:
    """Why a host's processes ended other than cleanly; None when its event cannot tell."""
    data = event_data(event)
    ended_for = data.get("ended_for")
    if ended_for == launch_reasons.FOR_STOP:
        return STOPPED_CAUSE
    if isinstance(ended_for, str) and ended_for:
        return f"ended by its agent ({ended_for})"
    code = data.get("returncode")
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"


def gave_up(event: Mapping[str, Any]) -> bool:
    """An interruption after which the agent stopped retrying (a host excluded from an
    elastic job is not one: the others go on without it)."""
    if event.get("kind") != INTERRUPTION:
        return False
    data = event_data(event)
    decision = dict_field(data, "decision")
    return decision.get("retry") is False and not data.get("exclusion")


def failure_reading(events: Iterable[Mapping[str, Any]]) -> str:
    """"failed (gpu2 gave up after oom: repeated 2 times without progress)": which
    host's agent stopped retrying, first, and why; the main screen says it where the
    ETA would be, so the operator need not look for it in the events."""
    given_up = _given_up(events)
    if not given_up:
        return "failed"
    first = given_up[0]
    data = event_data(first)
    decision = dict_field(data, "decision")
    reason = f": {decision['reason']}" if decision.get("reason") else ""
    others = f" (and {len(given_up) - 1} more)" if len(given_up) > 1 else ""
    return (f"failed ({first['host']}{others} gave up after {data.get('cause') or 'a failure'}"
            f"{reason})")


def hosts_given_up(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Hosts whose newest start-or-interruption is one their agent gave up after. On a
    multi-host job the job's newest event can be another host's restart into a
    rendezvous the failed host will never join: the job is failed all the same."""
    return sorted(str(e["host"]) for e in _given_up(events))


def _given_up(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each host's newest start-or-interruption that its agent gave up after, oldest
    first."""
    newest: dict[str, Mapping[str, Any]] = {}
    for event in sorted(events, key=_order):
        if event.get("kind") in (INTERRUPTION, JOB_STARTED) and event.get("host"):
            newest[str(event["host"])] = event
    return sorted((e for e in newest.values() if gave_up(e)), key=_order)


# Lifecycle kinds after which a host runs the job's processes (a resume also thaws a
# frozen job, which has no start of its own).
STARTING_KINDS = frozenset({JOB_STARTED, RESUME})


def process_starts(events: Iterable[Mapping[str, Any]], job: str | None) -> list[float]:
    """When `job`'s processes started or resumed: a stretch of time across one of these
    holds an outage or a pause, not only training."""
    return [float(e["ts"]) for e in events
            if e.get("job") == job and e.get("kind") in STARTING_KINDS and e.get("ts")]


def running_seconds(events: Iterable[Mapping[str, Any]], *, since: float,
                    until: float) -> float | None:
    """How long the job's processes ran between `since` and `until`, from its lifecycle
    events (any host's, oldest first); None when there are none to tell.

    Failures strike a running job only: the time it sat paused, or had exited while the
    recording went on, is no exposure to them, and counted into the MTBF it stretches
    the advised checkpoint interval. A host whose first event ends the job had it
    running from `since` (the recording began mid-run); a job adopted running by a
    restarted agent runs on.
    """
    changes: list[tuple[float, str, bool]] = []
    for e in events:
        kind = e.get("kind")
        if kind == JOB_ADOPTED:
            starts = event_data(e).get("running") is True
        elif kind in STARTING_KINDS:
            starts = True
        elif ended(e):
            starts = False
        else:
            continue
        ts = min(max(float(e.get("ts") or since), since), until)
        changes.append((ts, str(e.get("host")), starts))
    if not changes:
        return None
    running: dict[str, bool] = {}
    for _, host, starts in changes:
        running.setdefault(host, not starts)  # ran before the first event it has
    started_at = since if any(running.values()) else None
    total = 0.0
    for ts, host, starts in changes:
        was_any = any(running.values())
        running[host] = starts
        now_any = any(running.values())
        if now_any and not was_any:
            started_at = ts
        elif was_any and not now_any and started_at is not None:
            total += ts - started_at
            started_at = None
    if started_at is not None:
        total += until - started_at
    return max(total, 0.0)
