"""The Progress pane's part of a snapshot: the job's state (the agent's, never a guess
from silence), where it is, how fast it goes and when it ends, and its stages over time
(`stages`: start-up, train, eval, checkpoint, paused, restarting).

The state is read from the job's lifecycle events (starts, exits, pauses, resumes,
interruptions), so a finished, stopped or failed job never shows as running."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from agent.wire import states
from agent.wire.events import (
    INTERRUPTION,
    JOB_ADOPTED,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RECOVERY,
    RELAUNCH,
    RESUME,
)
from cockpit.analysis.eta import estimate_eta, progress_fraction, rescaled_steps
from cockpit.analysis.lifecycle import (
    event_data,
    exit_reading,
    failure_reading,
    gave_up,
    hosts_given_up,
    partly_paused_note,
    paused,
    running_seconds,
)
from cockpit.analysis.ranks import step_walls
from cockpit.analysis.stalls import StallVerdict
from cockpit.analysis.timeline import STAGE_EVENT_KINDS, STARTS, stage_spans
from cockpit.read.train_tail import TrainView, job_lifecycle, running_parts
from cockpit.snapshot import (
    Progress,
    StageSpan,
)
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_base import of_kinds

ACTIVE_STATES = (states.RUNNING,)

# Lifecycle events after which the job's processes are starting: until its first step,
# what the panes show is the previous attempt's.
STARTING_KINDS = (JOB_STARTED, RESUME, RELAUNCH)

# Lifecycle events that start or stop a job's processes: the run time its MTBF counts.
RUNNING_KINDS = (JOB_STARTED, JOB_EXITED, PAUSE, RESUME, JOB_ADOPTED)

def job_state(reader: StoreReader, job: str | None, until_ts: float | None,
           newest_step_ts: float | None, fr: Frontiers) -> str:
    """The job's state (`job_reading` without its note)."""
    return job_reading(reader, job, until_ts, newest_step_ts, fr)[0]


def job_reading(reader: StoreReader, job: str | None, until_ts: float | None,
                newest_step_ts: float | None, fr: Frontiers) -> tuple[str, str | None]:
    """The job's state, from its newest lifecycle event that took effect, and a note that
    qualifies it. A pause that took effect on some hosts only (rank 0's paused, another's
    pause failed and its part runs on) is not the job's: it reads as the hosts still
    running say, noted "partly paused: …" (`build_progress` shows the note)."""
    if job is None:
        return states.UNKNOWN, None
    last = job_lifecycle(reader, job, fr, until_ts)
    note = None
    if last is not None and paused(last):
        running = running_parts(reader, job, fr, until_ts)  # read only while paused
        if running:
            last = max(running.values(), key=lambda e: (float(e.get("ts") or 0.0),
                                                        int(e.get("seq") or 0)))
            note = partly_paused_note(running)
    return _state_of(reader, job, until_ts, newest_step_ts, fr, last), note


def _state_of(reader: StoreReader, job: str, until_ts: float | None,
              newest_step_ts: float | None, fr: Frontiers,
              last: Mapping[str, Any] | None) -> str:
    """The job's state as its newest lifecycle event in effect (`last`) says."""
    has_steps = newest_step_ts is not None
    kind = last["kind"] if last else None
    if last is not None and (gave_up(last) or hosts_given_up(
            lifecycle_events(reader, job, fr, until_ts))):
        # An agent gave up (a spec or code error, repeated OOM …); the other hosts'
        # parts then end too (the job cannot form without it): failed, not "exited".
        return states.FAILED
    if kind == JOB_EXITED:
        return states.EXITED
    data = event_data(last) if last else {}
    # A pause that failed (or a refused freeze) left the job running: not "paused".
    if last is not None and paused(last):
        return states.PAUSED
    if kind == INTERRUPTION:
        return states.RECOVERING
    if kind == JOB_ADOPTED and data.get("running") is True:
        return states.RUNNING  # a restarted agent found the job still running
    if last is not None and kind in STARTING_KINDS and (
            newest_step_ts is None or float(last["ts"]) > newest_step_ts):
        # Launched (again) and no step since: the figures are the last attempt's.
        return states.STARTING
    if has_steps or kind in (JOB_STARTED, RESUME, RECOVERY, RELAUNCH, PAUSE):
        return states.RUNNING
    return states.UNKNOWN

def lifecycle_events(reader: StoreReader, job: str, fr: Frontiers,
                      until_ts: float | None) -> list[dict[str, Any]]:
    """`job`'s starts, exits, pauses, resumes and interruptions (tens of events, not
    millions), read once per change of the event table: the state (which hosts gave
    up) and the MTBF (how long the job ran) both read them."""
    name = f"lifecycle-events:{job}"
    return reader.memo(name, (job, reader.event_version(name, fr, until_ts, of_kinds(
                           *RUNNING_KINDS, INTERRUPTION))),
                       lambda: reader.rare_events((*RUNNING_KINDS, INTERRUPTION), job,
                                                  until_ts))

def resume_step(last: Mapping[str, Any] | None) -> int | None:
    """The checkpoint step a paused job's resume starts from, as its pause event says."""
    if last is None or not paused(last):
        return None
    step = event_data(last).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None

def at_current_world(run: Mapping[str, Any], train: TrainView) -> TrainView:
    """`train` with the recent steps taken before the job's world last changed timed
    as they would be at its current world (`analysis.eta.rescaled_steps`): the ETA and
    the speed after a rescale are the new world's, not the old one's."""
    world, before = run.get("world_size"), run.get("world_before")
    if not (isinstance(world, int) and isinstance(before, int)) or isinstance(
            world, bool) or isinstance(before, bool):
        return train
    since = run.get("world_since")
    steps = rescaled_steps(train.samples, world=world, world_before=before,
                           world_since=float(since) if isinstance(since, (int, float))
                           else None)
    if all(a is b for a, b in zip(steps, train.samples, strict=True)):
        return train
    walls, wall_steps = step_walls(steps)
    return dataclasses.replace(train, walls=walls, wall_steps=wall_steps)


def build_progress(run: Mapping[str, Any], train: TrainView, now: float, state: str,
              stall: StallVerdict, resume_step: int | None = None,
              lifecycle: Sequence[Mapping[str, Any]] = (),
              qualified: str | None = None) -> Progress:
    """`lifecycle`: the job's lifecycle events, which say how an exited or failed job
    ended. `qualified`: `job_reading`'s note ("partly paused: …"), which stands where the
    ETA would: the job does not train as a whole."""
    newest = train.newest
    if state != states.PAUSED:
        resume_step = None
    if newest is None:
        note = qualified
        if state == states.EXITED:
            state, note = exit_reading(lifecycle, None)
        elif state == states.FAILED:
            note = failure_reading(lifecycle)
        return Progress(state=state, total_steps=run.get("total_steps"),
                        resume_step=resume_step, eta_note=note)
    step = int(newest["step"])
    total_steps = run.get("total_steps")
    # Seen so far, assuming the global batch of the newest step held throughout (per
    # optimizer step: a record covering N steps counts its samples over N).
    samples = round(step * train.global_samples) if train.global_samples is not None else None
    tokens = round(step * train.global_tokens) if train.global_tokens is not None else None
    percent = progress_fraction(
        step=step, total_steps=total_steps, samples=samples,
        total_samples=run.get("total_samples"), tokens=tokens,
        total_tokens=run.get("total_tokens"), epoch=newest.get("epoch"),
        total_epochs=run.get("total_epochs"),
    )
    steps_goal = total_steps
    if steps_goal is None and run.get("total_samples") and train.global_samples:
        steps_goal = math.ceil(run["total_samples"] / train.global_samples)
    if steps_goal is None and run.get("total_tokens") and train.global_tokens:
        steps_goal = math.ceil(run["total_tokens"] / train.global_tokens)
    timed = at_current_world(run, train)  # after a rescale: the new world's speed
    eta = estimate_eta(step=step, total_steps=steps_goal, recent_step_times=timed.walls,
                       step_counts=timed.wall_steps)
    # A job that is not running has no time left to estimate, only a reason why.
    eta_note = qualified
    if state == states.EXITED:
        state, eta_note = exit_reading(lifecycle, percent)
    elif state == states.FAILED:
        eta_note = failure_reading(lifecycle)
    elif state == states.PAUSED:
        # A job restarting ("starting") keeps its band: the time left is the speed it had
        # plus the rest of the restart (`analysis.eta.restart_aware`, applied by the caller).
        eta_note = state
    shown_state = states.STALLED if stall.stalled and state == states.RUNNING else state
    if shown_state == states.STALLED:
        # The rate of its last steps says nothing of when it resumes.
        eta_note = "stalled" + (f" ({qualified})" if qualified else "")
    if eta_note is not None:
        eta = dataclasses.replace(eta, seconds=None, low=None, high=None)
    return Progress(
        stage=newest.get("stage"),
        epoch=newest.get("epoch"),
        step=step,
        total_steps=total_steps,
        samples=samples,
        tokens=tokens,
        percent=None if percent is None else 100.0 * percent,
        eta_seconds=eta.seconds,
        eta_low=eta.low,
        eta_high=eta.high,
        eta_note=eta_note,
        steps_per_second=eta.steps_per_second,
        since_last_step=max(now - float(newest["ts"]), 0.0),
        stalled=stall.stalled,
        stall_cause=stall.cause,
        stall_detail=stall.detail,
        state=shown_state,
        resume_step=resume_step,
    )

def observed_seconds(lifecycle: Sequence[Mapping[str, Any]], job: str, since: float,
                     at: float) -> float:
    """The run time a job's MTBF is measured over: while its processes ran, not the
    pauses nor the recording's time after it exited (`running_seconds`); the span
    since `since` when no lifecycle event says more."""
    running = running_seconds((e for e in lifecycle if e.get("job") == job),
                              since=since, until=at)
    return at - since if running is None else running


def stages(reader: StoreReader, job: str | None, now: float, until_ts: float | None,
           fr: Frontiers) -> tuple[StageSpan, ...]:
    """The job's stages over time (`cockpit.analysis.timeline.stage_spans`), from its
    lifecycle events (kept and extended from those added since) and the first step after
    each start."""
    if job is None:
        return ()

    def extend(held: list[dict[str, Any]], after: float) -> list[dict[str, Any]] | None:
        added = reader.added_rows("event", after, until_ts, fr)
        if added is None:
            return None
        # In the full read's order (ts, seq): a host's event may come late.
        return sorted([*held, *(r for r in added if r.get("kind") in STAGE_EVENT_KINDS
                                and r.get("job") in (job, None))],
                      key=lambda r: (r["ts"], r["seq"]))

    events = reader.kept("stage_events", job, "event", fr,
                         lambda: reader.rare_events(STAGE_EVENT_KINDS, job, until_ts), extend)
    starts = sorted({float(e["ts"]) for e in events if e.get("kind") in STARTS})
    return stage_spans(events, now, first_steps(reader, job, starts, until_ts, fr))


def first_steps(reader: StoreReader, job: str, starts: list[float], until_ts: float | None,
                fr: Frontiers) -> list[float]:
    """The first step after each start. Once found it stands for good, and is kept;
    only a start still waiting for its first step is read again, when a record is added."""
    held = reader.recall("first_steps")
    known: dict[float, float] = {
        ts: first for ts, first in (held[1] if held is not None and held[0] == job else {}).items()
        if until_ts is None or first <= until_ts}  # a replay sought back has not seen it
    missing = [ts for ts in starts if ts not in known]
    if missing:
        found = reader.memo("first_steps_missing", (job, tuple(missing), fr.key("train")),
                            lambda: reader.first_step_ts_after(job, missing, until_ts=until_ts))
        known = {**known, **{ts: first for ts, first in found.items() if first is not None}}
        reader.remember("first_steps", job, known)
    return [known[ts] for ts in starts if ts in known]
