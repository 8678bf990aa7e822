"""KPIs of a job: where its allocated GPU time went, how fast it recovered, how long it took.

Pure functions over what the store returns (the job's lifecycle events, its
interruptions as `StoreReader.interruptions()` pairs them, the step totals of its
reference rank, the evaluations), so the arithmetic is tested on hand-made timelines.

The accounting, per job, on the wall clock from its launch to its end (the last exit
when it is not running any more, else the end of what was recorded):

* allocated GPU time = GPUs x that span; every second of it is productive or lost;
* lost spans, each second given to one cause in this order (an outage that began
  during a start-up is the outage's): interruption (failure to the first new step, or
  to the operator's next start or pause, or the job's next first step on any host, when
  the agent never recovered it), pause
  (an accepted pause to the next start of the processes, or a frozen job's thaw),
  stopped (a process exit to the next start), start-up (a start to its first step's
  beginning: imports, data, a checkpoint's load);
* lost inside the steps (the reference rank's step times; docs/hooks.md: a step's
  time is the wall time since the previous step, its phases inside it): data wait,
  checkpoint stalls (`ckpt_time`, else the `checkpoint_saved` events' seconds), and
  recomputed steps (a record of a step at or below one already reached: the work an
  interruption or a pause threw away, done again);
* productive = the remaining step time (compute, communication, evaluation);
* other = what is left of the span (shutdown after the last step, gaps no record
  covers); never negative.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from agent.wire import launch_reasons, ops
from agent.wire.events import (
    CONTROL_ACK,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RESUME,
    SLURM_RUNNING,
    SLURM_SUBMITTED,
)

# Lost-time causes, in the order a second covered by several is given to the first.
SPAN_CAUSES = ("interruption", "pause", "stopped", "startup")
STEP_CAUSES = ("data_wait", "checkpoint", "recomputed")
LOSS_CAUSES = (*SPAN_CAUSES, *STEP_CAUSES, "other")
# A trend in recovery times is named only when the later half's mean differs from the
# earlier half's by more than this fraction (noise in a few restarts is not a trend).
TREND_FRACTION = 0.10


@dataclass(frozen=True)
class StepTotals:
    """What a job's reference rank (its lowest) recorded of its steps, summed."""

    records: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    last_step: int | None = None
    step_time: float = 0.0  # of the records that reached new steps
    data_time: float = 0.0
    ckpt_time: float | None = None  # None: no record reported a checkpoint phase
    redo_records: int = 0
    redo_steps: int = 0
    redo_time: float = 0.0  # the whole step time of the records that redid steps


@dataclass(frozen=True)
class JobKpis:
    job: str
    recording: str | None
    gpus: int
    gpus_from: str  # "world size", "inventory", "assumed 1"
    launched: float | None
    end: float | None
    running: bool  # still running at `end` (the recording's end)
    finished: bool  # its last exit was a clean one (code 0)
    span_s: float
    gpu_hours: float
    productive_s: float
    utilization: float | None  # productive / span (0..1)
    lost_s: dict[str, float] = field(default_factory=dict)  # cause -> wall seconds
    lost_gpu_hours: dict[str, float] = field(default_factory=dict)
    interruptions: int = 0
    recovered: int = 0
    recovery_s: tuple[float, ...] = ()  # each recovered outage's time, oldest first
    mttr_s: float | None = None
    mttr_trend: str = "n/a"
    steps_recomputed: int = 0
    checkpoint_share: float | None = None  # checkpoint stalls / span (0..1)
    last_step: int | None = None
    last_step_ts: float | None = None
    turnaround_s: float | None = None  # launch (a batch job: its submission) -> last step
    # A batch scheduler's queue: the seconds its submissions waited to start, summed
    # (counted in the turnaround, not in the GPU time: nothing was allocated).
    queue_wait_s: float | None = None
    submitted: float | None = None  # the first submission to a batch scheduler
    target_loss: float | None = None
    target_reached_ts: float | None = None
    turnaround_to_target_s: float | None = None
    gpu_hours_by_week: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class KpiTotals:
    jobs: int
    gpu_hours: float
    productive_gpu_hours: float
    utilization: float | None
    lost_gpu_hours: dict[str, float]
    interruptions: int
    recovered: int
    mttr_s: float | None
    mttr_trend: str
    checkpoint_share: float | None
    gpu_hours_by_week: dict[str, float]


# --- the pieces ----------------------------------------------------------------------


def _data(e: Mapping[str, Any]) -> Mapping[str, Any]:
    d = e.get("data")
    return d if isinstance(d, Mapping) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _of_job(events: Iterable[Mapping[str, Any]], job: str) -> list[Mapping[str, Any]]:
    """The job's events, oldest first; a launch acknowledgement names its job in data."""
    out = []
    for e in events:
        if e.get("job") == job or (e.get("job") is None and _data(e).get("job") == job):
            out.append(e)
    return sorted(out, key=lambda e: (float(e["ts"]), e.get("seq") or 0))


def launched_at(events: Sequence[Mapping[str, Any]], first_declared: float | None
                ) -> float | None:
    """Submit time: the operator's launch acknowledgement, else the first start, else
    the first `run` record (a trainer run without an agent)."""
    times = [float(e["ts"]) for e in events
             if (e.get("kind") == CONTROL_ACK and _data(e).get("op") in (ops.LAUNCH, ops.FORK)
                 and _data(e).get("ok") is not False)
             or e.get("kind") == JOB_STARTED]
    if first_declared is not None:
        times.append(first_declared)
    return min(times) if times else None


def queued(events: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """(the first submission's time, the queue wait of every submission summed) of a
    job on a batch scheduler (`slurm_submitted`, `slurm_running` events); Nones else."""
    # The cockpit's own sbatch, or Slurm's SubmitTime as a watch saw it (another
    # process submitted the job, into another recording).
    submits = [float(e["ts"]) for e in events if e.get("kind") == SLURM_SUBMITTED]
    submits += [t for e in events if e.get("kind") == SLURM_RUNNING
                if (t := _num(_data(e).get("submitted_at"))) is not None]
    waits = [w for e in events if e.get("kind") == SLURM_RUNNING
             if (w := _num(_data(e).get("queue_wait"))) is not None and w >= 0]
    return min(submits, default=None), (sum(waits) if waits else None)


def job_state(events: Sequence[Mapping[str, Any]]) -> tuple[bool, bool, float | None]:
    """(running, finished, last exit ts) from the newest start and exit events."""
    last_start = max((float(e["ts"]) for e in events if e.get("kind") == JOB_STARTED),
                     default=None)
    exits = [e for e in events if e.get("kind") == JOB_EXITED]
    last_exit = exits[-1] if exits else None
    exit_ts = float(last_exit["ts"]) if last_exit is not None else None
    if last_exit is None or exit_ts is None or (last_start is not None
                                                and last_start > exit_ts):
        return last_start is not None, False, exit_ts
    code = _data(last_exit).get("returncode")
    return False, code == 0 and not isinstance(code, bool), exit_ts


def lost_spans(events: Sequence[Mapping[str, Any]],
               interruptions: Sequence[Mapping[str, Any]],
               first_steps: Mapping[float, float | None],
               end: float) -> list[tuple[str, float, float]]:
    """(cause, start, end) spans in which the job made no step: `first_steps` maps each
    `job_started` (and `job_exited`) ts to when the job's first step after it began
    (None: none yet)."""
    spans: list[tuple[str, float, float]] = []
    starts = [float(e["ts"]) for e in events if e.get("kind") == JOB_STARTED]
    resumes = sorted(float(e["ts"]) for e in events
                     if (e.get("kind") == JOB_STARTED
                         and _data(e).get("reason") in launch_reasons.OPERATOR_STARTS)
                     # a frozen job's thaw; a resume of a stopped one ends at its start
                     or (e.get("kind") == RESUME and _data(e).get("mode") == "thaw"))
    pauses = sorted(float(e["ts"]) for e in events if e.get("kind") == PAUSE
                    and _data(e).get("ok") is not False)

    def next_after(times: Sequence[float], t: float) -> float:
        return next((x for x in times if x > t), end)

    for item in interruptions:
        latency = _num(item.get("detection_latency")) or 0.0
        detected = _num(item.get("detected_at"))
        recovered_in, recovered_at = (_num(item.get("recovered_in")),
                                      _num(item.get("recovered_at")))
        if recovered_in is not None and recovered_at is not None:
            lo = recovered_at - recovered_in
            # Up to the restart's first step's beginning: that step's own time is counted
            # as step time (the agent measures the outage to the step's record).
            began = [b for t in starts if lo <= t <= recovered_at
                     and (b := first_steps.get(t)) is not None]
            stop = min([recovered_at, *(max(lo, b) for b in began)])
            spans.append(("interruption", lo, stop))
        elif detected is not None:
            # Not recovered: over at the operator's next start or pause, or when the job
            # trained again (a start's first step after it, on any host: it came back).
            back = [b for b in first_steps.values() if b is not None and b > detected]
            stop = min(next_after(resumes, detected), next_after(pauses, detected),
                       *back)
            spans.append(("interruption", detected - latency, stop))
    for t in pauses:
        spans.append(("pause", t, next_after(resumes, t)))
    for e in events:
        if e.get("kind") == JOB_EXITED:
            t = float(e["ts"])
            # Over at the next start, or at the job's next step (a peer trained on
            # without this host: an elastic job's exclusion), whichever comes first.
            after = first_steps.get(t)
            spans.append(("stopped", t, min(next_after(starts, t),
                                            end if after is None else max(t, after))))
    for t in starts:
        first = first_steps.get(t)
        spans.append(("startup", t, end if first is None else min(first, end)))
    return spans


def split_spans(spans: Iterable[tuple[str, float, float]], lo: float, hi: float,
                order: Sequence[str] = SPAN_CAUSES) -> dict[str, float]:
    """Seconds of [lo, hi] per cause, each second given to the first cause in `order`
    whose spans cover it (overlapping spans are counted once)."""
    clipped = [(c, max(a, lo), min(b, hi)) for c, a, b in spans if min(b, hi) > max(a, lo)]
    cuts = sorted({lo, hi, *(a for _, a, _ in clipped), *(b for _, _, b in clipped)})
    out = dict.fromkeys(order, 0.0)
    rank = {c: i for i, c in enumerate(order)}
    for a, b in itertools.pairwise(cuts):
        covering = [c for c, s, e in clipped if s <= a and e >= b and c in rank]
        if covering:
            out[min(covering, key=rank.__getitem__)] += b - a
    return out


def mttr_trend(values: Sequence[float]) -> str:
    """Whether recoveries get shorter or longer: the later half's mean against the
    earlier half's ("n/a" under two recoveries)."""
    if len(values) < 2:
        return "n/a"
    half = len(values) // 2
    early = sum(values[:half]) / half
    late = sum(values[-half:]) / half
    if early <= 0:
        return "steady"
    change = (late - early) / early
    if change < -TREND_FRACTION:
        return f"shorter ({early:.3g} s -> {late:.3g} s)"
    if change > TREND_FRACTION:
        return f"longer ({early:.3g} s -> {late:.3g} s)"
    return "steady"


def iso_week(ts: float) -> str:
    year, week, _ = datetime.fromtimestamp(ts, tz=timezone.utc).isocalendar()
    return f"{year}-W{week:02d}"


def hours_by_week(lo: float, hi: float, gpus: int) -> dict[str, float]:
    """GPU-hours of [lo, hi] on `gpus` GPUs, split at UTC ISO-week boundaries."""
    out: dict[str, float] = {}
    t = lo
    while t < hi:
        day = datetime.fromtimestamp(t, tz=timezone.utc)
        monday = (day - timedelta(days=day.weekday())).replace(
            hour=0, minute=0, second=0, microsecond=0)
        stop = min(hi, (monday + timedelta(days=7)).timestamp())
        week = iso_week(t)
        out[week] = out.get(week, 0.0) + gpus * (stop - t) / 3600.0
        t = stop
    return out


def target_reached(evals: Iterable[tuple[float, float | None]], target: float | None
                   ) -> float | None:
    """When the validation loss first reached `target` (at or below it)."""
    if target is None:
        return None
    hits = [ts for ts, loss in evals if loss is not None and loss <= target]
    return min(hits) if hits else None


# --- one job, many jobs -----------------------------------------------------------------


def job_kpis(job: str, *, events: Iterable[Mapping[str, Any]],
             interruptions: Sequence[Mapping[str, Any]], steps: StepTotals,
             first_steps: Mapping[float, float | None], gpus: int, gpus_from: str,
             recording_end: float | None, first_declared: float | None = None,
             checkpoint_seconds: Sequence[float | None] = (),
             evals: Iterable[tuple[float, float | None]] = (),
             target_loss: float | None = None, recording: str | None = None) -> JobKpis:
    """The KPIs of `job` (see the module docstring for what each second counts as)."""
    mine = _of_job(events, job)
    launched = launched_at(mine, first_declared)
    running, finished, exit_ts = job_state(mine)
    if (not running and exit_ts is not None and steps.last_ts is not None
            and steps.last_ts > exit_ts):
        running, finished = True, False  # a host's part ended; the others train on
    ends = [t for t in (steps.last_ts, exit_ts) if t is not None]
    end = recording_end if running and recording_end is not None else max(ends, default=None)
    if launched is None and steps.first_ts is not None:
        launched = steps.first_ts
    span = max(0.0, end - launched) if launched is not None and end is not None else 0.0
    outages = [i for i in interruptions if i.get("job") in (job, None)]
    lost = dict.fromkeys(LOSS_CAUSES, 0.0)
    if span > 0 and launched is not None and end is not None:  # span > 0 says both are
        lost.update(split_spans(lost_spans(mine, outages, first_steps, end), launched, end))
    ckpt = steps.ckpt_time
    if ckpt is None:
        ckpt = sum(s for s in checkpoint_seconds if s is not None and s > 0)
    lost["data_wait"] = max(0.0, steps.data_time)
    lost["checkpoint"] = max(0.0, ckpt)
    lost["recomputed"] = max(0.0, steps.redo_time)
    productive = max(0.0, steps.step_time - lost["data_wait"] - lost["checkpoint"])
    lost["other"] = max(0.0, span - productive - sum(lost[c] for c in LOSS_CAUSES
                                                     if c != "other"))
    recovery = tuple(float(i["recovered_in"]) for i in outages
                     if _num(i.get("recovered_in")) is not None)
    reached = target_reached(evals, target_loss)
    # The turnaround runs from the submission when a scheduler queued the job first.
    submitted, queue_wait = queued(mine)
    start = launched if submitted is None or launched is None else min(submitted, launched)
    weeks = (hours_by_week(launched, end, gpus)
             if span > 0 and launched is not None and end is not None else {})
    return JobKpis(
        job=job, recording=recording, gpus=gpus, gpus_from=gpus_from, launched=launched,
        end=end, running=running, finished=finished, span_s=span,
        gpu_hours=gpus * span / 3600.0, productive_s=productive,
        utilization=productive / span if span > 0 else None,
        lost_s=lost, lost_gpu_hours={c: gpus * s / 3600.0 for c, s in lost.items()},
        interruptions=len(outages), recovered=len(recovery), recovery_s=recovery,
        mttr_s=sum(recovery) / len(recovery) if recovery else None,
        mttr_trend=mttr_trend(recovery), steps_recomputed=steps.redo_steps,
        checkpoint_share=lost["checkpoint"] / span if span > 0 else None,
        last_step=steps.last_step, last_step_ts=steps.last_ts,
        turnaround_s=(steps.last_ts - start
                      if steps.last_ts is not None and start is not None else None),
        target_loss=target_loss, target_reached_ts=reached,
        turnaround_to_target_s=(reached - start
                                if reached is not None and start is not None else None),
        gpu_hours_by_week=weeks, queue_wait_s=queue_wait, submitted=submitted,
    )


def totals(jobs: Sequence[JobKpis]) -> KpiTotals:
    """The KPIs of many jobs together: GPU-hour-weighted utilization, MTTR over every
    recovery (oldest first by the jobs' launch), GPU-hours per week summed."""
    gpu_hours = sum(j.gpu_hours for j in jobs)
    productive = sum(j.gpus * j.productive_s / 3600.0 for j in jobs)
    lost = {c: sum(j.lost_gpu_hours.get(c, 0.0) for j in jobs) for c in LOSS_CAUSES}
    ordered = sorted(jobs, key=lambda j: (j.launched is None, j.launched or 0.0))
    recovery = [r for j in ordered for r in j.recovery_s]
    weeks: dict[str, float] = {}
    for j in jobs:
        for week, hours in j.gpu_hours_by_week.items():
            weeks[week] = weeks.get(week, 0.0) + hours
    return KpiTotals(
        jobs=len(jobs), gpu_hours=gpu_hours, productive_gpu_hours=productive,
        utilization=productive / gpu_hours if gpu_hours > 0 else None,
        lost_gpu_hours=lost, interruptions=sum(j.interruptions for j in jobs),
        recovered=len(recovery), mttr_s=sum(recovery) / len(recovery) if recovery else None,
        mttr_trend=mttr_trend(recovery),
        checkpoint_share=lost["checkpoint"] / gpu_hours if gpu_hours > 0 else None,
        gpu_hours_by_week=dict(sorted(weeks.items())),
    )


__all__ = ["LOSS_CAUSES", "JobKpis", "KpiTotals", "StepTotals", "job_kpis", "lost_spans",
           "mttr_trend", "split_spans", "totals"]
