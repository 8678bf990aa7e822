"""Where snapshots come from: the `Source` interface and `build_snapshot`.

Live and replay are both `Source`s over the same store; `build_snapshot` turns the
store (read through `StoreReader`, at a cursor) and the analysis rules into one frozen
`Snapshot`, so the UI has a single render path and the report prints the same figures.
The cost of a snapshot does not grow with the run: latest values are read from recent
windows, step statistics from a bounded step range, and every series is downsampled
in SQL to `buckets` points, the reference rank's four step series in one statement.
Where every table ends at the cursor is found once per snapshot
(`StoreReader.frontiers`), and every read is remembered on the reader under the
frontiers of the tables it looks at, so it is redone only when one of them gains a
visible row: a refresh with nothing new (a finished run, a paused replay, a quiet
fleet) reads almost nothing, and a refresh after a training step reads the rows that
step added and folds them into what it holds (the series, the newest samples, the
recent steps: `cockpit.read.train_tail`, `ReaderBase.added_after`), not the events,
evaluations or run facts. The reads that do not depend on one another run side by side
in a small pool (DuckDB releases the GIL while it executes).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cockpit.analysis import alerts as rules
from cockpit.analysis import signal_alerts
from cockpit.analysis.checkpoint_interval import advise
from cockpit.analysis.divergence import (
    BestValidation,
    Divergence,
    best_validation,
    divergence_after,
)
from cockpit.analysis.efficiency import EfficiencyFigures, compute_efficiency
from cockpit.analysis.eta import estimate_eta, progress_fraction
from cockpit.analysis.incidents import merge_incidents
from cockpit.analysis.lifecycle import (
    ENDED_STATES,
    event_data,
    exit_reading,
    failure_reading,
    gave_up,
    hosts_given_up,
    paused,
    process_starts,
    running_seconds,
)
from cockpit.analysis.lr import (
    lr_adjustment_steps,
    lr_changes,
    lr_looks_too_high,
    scale_in_force,
)
from cockpit.analysis.markers import MARKER_KINDS, chart_markers
from cockpit.analysis.smoothing import ema
from cockpit.analysis.spikes import find_spikes
from cockpit.analysis.stalls import HostPressure, StallVerdict, detect_stall
from cockpit.read.details import (
    DETAIL_KINDS,
    EventsTimeline,
    HostDetail,
    LogTail,
    RunInfo,
    event_rows,
    events_timeline,
    host_detail,
    link_state,
    log_tail,
    recording_ended,
    run_info,
)
from cockpit.read.train_tail import TrainTail, TrainView, job_lifecycle
from cockpit.snapshot import (
    Alert,
    Effect,
    Efficiency,
    GpuCell,
    Health,
    HostHealth,
    Interruption,
    Marker,
    Progress,
    RankTime,
    Series,
    Snapshot,
)
from cockpit.store.earlier_runs import is_earlier_run
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_train import NonFinite

__all__ = [
    "DETAIL_KINDS",
    "Source",
    "build_snapshot",
    "details",
    "observed_seconds",
]

EVENTS_SHOWN = 50
MAX_PINNED_SPIKES = 20
ACTIVE_STATES = ("running",)
# Lifecycle events after which the job's processes are starting: until its first step,
# what the panes show is the previous attempt's.
STARTING_KINDS = ("job_started", "resume", "relaunch")
DATA_EVENT_KINDS = ("spool_error", "dropped")
# Lifecycle events that start or stop a job's processes: the run time its MTBF counts.
RUNNING_KINDS = ("job_started", "job_exited", "pause", "resume", "job_adopted")
DATA_EVENTS_READ = 500
STARTS_READ = 500  # newest job starts read to tell which agent alerts a restart ended
# Points per chart series. The loss analysis (spikes, divergence, LR) reads the same
# series, so the screen and the report must ask for the same number to agree.
SNAPSHOT_BUCKETS = 120
READ_THREADS = 4  # store reads of one snapshot that may run at once (see `_read_pool`)


class Controller(Protocol):
    """Job operations (defined by cockpit.control); only the presence matters here."""


class Source(Protocol):
    label: str  # "LIVE" or "REPLAY 10x"
    controller: Controller | None  # None: "no controllable job attached"
    # The operator's pick among jobs training side by side (None: the newest started);
    # a source that cannot choose (a fixed snapshot) ignores it.
    focus_job: str | None

    def start(self, on_data: Callable[[], None]) -> None: ...

    # Blocking: called off the UI thread.
    def snapshot(self, buckets: int = SNAPSHOT_BUCKETS) -> Snapshot: ...

    def stop(self) -> None: ...

    def details(self, what: str, **kw: Any) -> object: ...


def details(
    reader: StoreReader, what: str, *, until_ts: float | None = None, **kw: Any
) -> HostDetail | EventsTimeline | RunInfo | LogTail:
    """Drill-down data for `Source.details`: "host" (host=NAME), "events" (kinds, text,
    limit), "run", "log" (n, text)."""
    if what == "host":
        host = kw.get("host")
        if not isinstance(host, str) or not host:
            raise ValueError('details("host") needs host=NAME')
        return host_detail(reader, host, until_ts=until_ts, buckets=int(kw.get("buckets", 120)))
    if what == "events":
        return events_timeline(reader, until_ts=until_ts, kinds=kw.get("kinds"),
                               text=kw.get("text"), limit=int(kw.get("limit", 500)),
                               job=kw.get("job"))
    if what == "run":
        return run_info(reader, until_ts=until_ts, job=kw.get("job"))
    if what == "log":
        return log_tail(reader, until_ts=until_ts, n=int(kw.get("n", 500)),
                        text=kw.get("text"), job=kw.get("job"))
    raise ValueError(f"unknown details kind {what!r}; expected one of {', '.join(DETAIL_KINDS)}")


def _newest_per_host(*groups: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The newest ts per host among rows the snapshot already holds."""
    newest: dict[str, float] = {}
    for rows in groups:
        for r in rows:
            ts = r.get("ts")
            if ts is not None and ts > newest.get(r["host"], float("-inf")):
                newest[r["host"]] = ts
    return newest


def _state(reader: StoreReader, job: str | None, until_ts: float | None,
           newest_step_ts: float | None, fr: Frontiers) -> str:
    if job is None:
        return "unknown"
    has_steps = newest_step_ts is not None
    last = job_lifecycle(reader, job, fr, until_ts)
    kind = last["kind"] if last else None
    if last is not None and (gave_up(last) or hosts_given_up(
            _lifecycle_events(reader, job, fr, until_ts))):
        # An agent gave up (a spec or code error, repeated OOM …); the other hosts'
        # parts then end too (the job cannot form without it): failed, not "exited".
        return "failed"
    if kind == "job_exited":
        return "exited"
    data = event_data(last) if last else {}
    # A pause that failed (or a refused freeze) left the job running: not "paused".
    if last is not None and paused(last):
        return "paused"
    if kind == "interruption":
        return "recovering"
    if kind == "job_adopted" and data.get("running") is True:
        return "running"  # a restarted agent found the job still running
    if kind in STARTING_KINDS and (not has_steps or float(last["ts"]) > newest_step_ts):
        # Launched (again) and no step since: the figures are the last attempt's.
        return "starting"
    if has_steps or kind in ("job_started", "resume", "recovery", "relaunch", "pause"):
        return "running"
    return "unknown"


def _lifecycle_events(reader: StoreReader, job: str, fr: Frontiers,
                      until_ts: float | None) -> list[Mapping[str, Any]]:
    """`job`'s starts, exits, pauses, resumes and interruptions (tens of events, not
    millions), read once per change of the event table: the state (which hosts gave
    up) and the MTBF (how long the job ran) both read them."""
    return reader.memo(f"lifecycle-events:{job}", (job, fr.key("event")),
                       lambda: reader.rare_events((*RUNNING_KINDS, "interruption"), job,
                                                  until_ts))



def _pressure(hosts: Sequence[Mapping[str, Any]], samples: Sequence[Mapping[str, Any]],
              gpus: Sequence[Mapping[str, Any]]) -> list[HostPressure]:
    cpus = {h["host"]: h.get("cpu_count") for h in hosts}
    out = []
    for s in samples:
        name = s["host"]
        utils = [g["util"] for g in gpus if g["host"] == name and g.get("util") is not None]
        cpu_count = cpus.get(name)
        out.append(HostPressure(
            host=name,
            cpu=s.get("cpu"),
            load_per_cpu=s["load1"] / cpu_count if s.get("load1") is not None and cpu_count
            else None,
            mem_frac=_frac(s.get("mem_used"), s.get("mem_total")),
            swap_frac=_frac(s.get("swap_used"), s.get("swap_total")),
            disk_frac=_frac(s.get("disk_used"), s.get("disk_total")),
            gpu_util=sum(utils) / len(utils) if utils else None,
        ))
    return out


def _frac(used: Any, total: Any) -> float | None:
    return used / total if used is not None and total else None


def _resume_step(last: Mapping[str, Any] | None) -> int | None:
    """The checkpoint step a paused job's resume starts from, as its pause event says."""
    if last is None or not paused(last):
        return None
    step = event_data(last).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _progress(run: Mapping[str, Any], train: TrainView, now: float, state: str,
              stall: StallVerdict, resume_step: int | None = None,
              lifecycle: Sequence[Mapping[str, Any]] = ()) -> Progress:
    """`lifecycle`: the job's lifecycle events, which say how an exited or failed job
    ended."""
    newest = train.newest
    if state != "paused":
        resume_step = None
    if newest is None:
        note = None
        if state == "exited":
            state, note = exit_reading(lifecycle, None)
        elif state == "failed":
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
    eta = estimate_eta(step=step, total_steps=steps_goal, recent_step_times=train.walls,
                       step_counts=train.wall_steps)
    # A job that is not running has no time left to estimate, only a reason why.
    eta_note = None
    if state == "exited":
        state, eta_note = exit_reading(lifecycle, percent)
    elif state == "failed":
        eta_note = failure_reading(lifecycle)
    elif state in ("paused", "starting"):
        eta_note = state
    shown_state = "stalled" if stall.stalled and state == "running" else state
    if shown_state == "stalled":
        eta_note = "stalled"  # the rate of its last steps says nothing of when it resumes
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


@dataclass(frozen=True)
class _EffectFindings:
    effect: Effect
    divergence: Divergence | None
    lr_reason: str | None


@dataclass(frozen=True)
class _Evals:
    """The evaluations' share of the Effect pane: changes only when one is added."""

    points: list[tuple[int, float | None]]
    series: Series
    last_finite: float | None
    best: BestValidation | None


def _evals(reader: StoreReader, job: str, until_ts: float | None, buckets: int,
           fr: Frontiers) -> _Evals:
    """A job evaluates every few hundred steps, for days: its evaluations are kept
    (`StoreReader.kept`) and the new ones folded in, rather than all read again on each
    refresh that finds one."""
    def extend(held: dict[int, tuple[float, int, float | None]],
               after: float) -> dict[int, tuple[float, int, float | None]] | None:
        added = reader.added_rows("eval", after, until_ts, fr)
        if added is None:
            return None
        by_step = dict(held)
        for row in added:
            if row["job"] != job or row["step"] is None:
                continue
            step = int(row["step"])
            old = by_step.get(step)
            if old is None or (row["ts"], row["seq"]) > old[:2]:
                by_step[step] = (row["ts"], row["seq"], row["loss"])
        return by_step

    by_step = reader.kept("eval_losses", job, "eval", fr,
                          lambda: reader.eval_losses(job, until_ts=until_ts), extend)
    points = [(step, found[2]) for step, found in sorted(by_step.items())]
    finite_val = [v for _, v in points if v is not None and math.isfinite(v)]
    return _Evals(
        points=points,
        series=_thin([(float(s), v) for s, v in points], buckets),
        last_finite=finite_val[-1] if finite_val else None,
        best=best_validation(points),
    )


# What the panes draw per step (and the gradient norm, which the alerts watch).
TRAIN_SERIES = ("loss", "lr", "loss_scale", "grad_norm", "step_time")


def _train_series(reader: StoreReader, job: str | None, train: TrainView,
                  until_ts: float | None, buckets: int, fr: Frontiers) -> dict[str, Series]:
    """The reference rank's step series, read together (one x range, one statement).

    Without a reference rank (no rank reported) the effect series are drawn over the
    whole job and there is no throughput history, as each pane would read them alone.
    """
    if job is None or train.newest is None:
        return {}
    where: dict[str, Any] = {"job": job}
    columns = TRAIN_SERIES[:4]
    if train.ref_rank is not None:
        where["rank"] = train.ref_rank
        columns = TRAIN_SERIES

    found = reader.series_columns_held("train_series", "train", columns, where=where,
                                       x="step", buckets=buckets, until_ts=until_ts,
                                       frontiers=fr)
    return dict(zip(columns, found, strict=True))


def _effect(reader: StoreReader, job: str | None, train: TrainView, until_ts: float | None,
            buckets: int, fr: Frontiers, series: Mapping[str, Series],
            nonfinite: NonFinite) -> _EffectFindings:
    if job is None:
        return _EffectFindings(Effect(), None, None)
    loss = series.get("loss", Series())
    lr = series.get("lr", Series())
    scale = series.get("loss_scale", Series())
    smoothed = Series(loss.x, tuple(ema(loss.last)), loss.lo, loss.hi)
    evals = reader.memo("evals", (job, buckets, fr.key("eval")),
                        lambda: _evals(reader, job, until_ts, buckets, fr))
    spikes = _pin_spikes(reader, job, train.ref_rank, loss,
                         find_spikes(loss.x, loss.last, loss.hi), until_ts)
    divergence = divergence_after(evals.best,
                                  list(zip(smoothed.x, smoothed.last, strict=True)))
    markers = _markers(reader, job, until_ts, fr)
    # A resume (a fork's start included: it resumes its parent's checkpoint) restarts
    # the curve the LR rule reads.
    restarts = [m.step for m in markers if m.kind == "restart"]
    lr_reason = lr_looks_too_high(
        list(zip(smoothed.x, smoothed.last, strict=True)), list(zip(lr.x, lr.last, strict=True)),
        spike_steps=spikes, nonfinite_steps=nonfinite.steps,
        after_step=max(restarts) if restarts else None,
    )
    # The figure must match the curve drawn: both come from the reference rank.
    newest = next((r for r in train.latest if r["rank"] == train.ref_rank), None) \
        or train.newest or {}
    effect = Effect(
        train_loss=loss,
        train_loss_ema=smoothed,
        val_loss=evals.series,
        loss_scale=scale,
        lr=lr,
        last_loss=newest.get("loss"),
        last_val_loss=evals.last_finite,
        best_val_step=divergence.best_step,
        best_val_loss=divergence.best_loss,
        divergence_step=divergence.step,
        spike_steps=spikes,
        nonfinite_steps=nonfinite.steps,
        nonfinite_count=nonfinite.count,
        nonfinite_last=nonfinite.last,
        last_loss_scale=newest.get("loss_scale"),
        markers=markers,
        last_lr=newest.get("lr"),
        lr_scale=scale_in_force(markers),
        lr_changes=lr_changes(markers, _lr_around(reader, job, train.ref_rank, markers,
                                                  until_ts, fr)),
    )
    return _EffectFindings(effect, divergence, lr_reason)


def _lr_around(reader: StoreReader, job: str, rank: int | None, markers: Sequence[Marker],
               until_ts: float | None, fr: Frontiers) -> dict[int, tuple[Any, Any]]:
    """The LR recorded before and after each of the operator's LR changes. Once the
    record after a change is in, the pair stands for every later instant, and is kept;
    only a change still waiting for that record (the newest, for a step or so) is read
    again, and only when a training record was added."""
    steps = lr_adjustment_steps(markers)
    if not steps:
        return {}
    held = reader.recall("lr_around")
    known = held[1] if held is not None and held[0] == (job, rank) else {}
    done = {s: v for s, v in known.items() if s in steps and v[1] is not None
            and v[2] is not None and (until_ts is None or v[2] <= until_ts)}
    missing = tuple(s for s in steps if s not in done)
    if missing:
        done.update(reader.memo(
            "lr_around_missing", (job, rank, missing, fr.key("train")),
            lambda: reader.lr_around(job, rank, list(missing), until_ts=until_ts)))
        reader.remember("lr_around", (job, rank), done)
    return {s: (v[0], v[1]) for s, v in done.items()}


def _markers(reader: StoreReader, job: str, until_ts: float | None,
             fr: Frontiers) -> tuple[Marker, ...]:
    """Adjustments and restarts to mark on the loss chart, kept and extended from the
    events added since (checkpoints add one every few minutes for days)."""
    def extend(held: tuple[Marker, ...], after: float) -> tuple[Marker, ...] | None:
        added = reader.added_rows("event", after, until_ts, fr)
        if added is None:
            return None
        return chart_markers((r for r in added if r["job"] in (job, None)), held=held)

    return reader.kept("chart_markers", job, "event", fr,
                       lambda: chart_markers(reader.rare_events(MARKER_KINDS, job, until_ts)),
                       extend)


def _nonfinite(reader: StoreReader, job: str, until_ts: float | None,
               fr: Frontiers) -> NonFinite:
    """NaN/Inf steps, found anew only in the rows added since the last answer when
    that is exact (`StoreReader.kept`): the full read scans the whole job."""
    def extend(held: NonFinite, after: float) -> NonFinite | None:
        added = reader.added_rows("train", after, until_ts, fr)
        if added is None:
            return None
        rows = [r for r in added if r["job"] == job and r["nonfinite"] is not None
                and r["step"] is not None]
        return held.extended({int(r["step"]) for r in rows},
                             min((float(r["ts"]) for r in rows), default=None))

    return reader.kept("nonfinite", job, "train", fr,
                       lambda: reader.nonfinite_summary(job, until_ts=until_ts), extend)


def _pin_spikes(reader: StoreReader, job: str, rank: int | None, loss: Series,
                spike_xs: Sequence[float], until_ts: float | None) -> tuple[int, ...]:
    """A bucket's x is its last step; the spike is wherever in the bucket loss peaked.

    Pins are kept from one refresh to the next: a spike's bucket reads the same (same
    step range, minimum, maximum and last loss) until a row in it is added or hidden,
    and only the buckets that changed, usually none, are looked up again.
    """
    shown = spike_xs[-MAX_PINNED_SPIKES:]
    keys = []
    for x in shown:
        i = loss.x.index(x)
        first = loss.x[i - 1] + 1 if i > 0 else x
        keys.append((first, x, loss.lo[i], loss.hi[i], loss.last[i]))
    known: dict[tuple[Any, ...], int | None] = reader.memo("spike_pins", (job, rank), dict)
    missing = [k for k in keys if k not in known]
    if missing:
        exact = reader.peak_steps(job, rank, "loss", [(k[0], k[1]) for k in missing],
                                  until_ts=until_ts)
        known = {**{k: known[k] for k in keys if k in known},
                 **dict(zip(missing, exact, strict=True))}
        reader.remember("spike_pins", (job, rank), known)
    return tuple(known[k] if known[k] is not None else int(k[1]) for k in keys)


def _thin(points: list[tuple[float, float | None]], buckets: int) -> Series:
    """Evaluations are few; keep them all unless there are more than `buckets`."""
    if len(points) > buckets > 0:
        stride = math.ceil(len(points) / buckets)
        points = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
    return Series(tuple(p[0] for p in points), tuple(p[1] for p in points),
                  tuple(p[1] for p in points), tuple(p[1] for p in points))


def _rank0_alone_until(reader: StoreReader, job: str | None, world: Any,
                       until_ts: float | None) -> float | None:
    """When a replay's cursor lies before the oldest step any other rank has kept, that
    step's ts; else None.

    Retention drops the steps of ranks other than 0 past the raw window
    (`cockpit.store.retention`), so there rank 0 must stand for the whole job. Only a
    replay can look that far back (a live view is at the newest records), and a replayed
    recording does not change, so the answer is read once per job.
    """
    if until_ts is None or job is None or not isinstance(world, int) or world <= 1:
        return None
    first = reader.memo("first_other_rank_ts", job, lambda: reader.first_other_rank_ts(job))
    return first if first is not None and until_ts < first else None


def _whole_job(train: TrainView, world: int) -> TrainView:
    """Rank 0's view with its per-step totals counted for all `world` ranks: the ranks of
    a data-parallel job each take an equal share of a step."""
    return dataclasses.replace(train, global_samples=_times(train.global_samples, world),
                               global_tokens=_times(train.global_tokens, world))


def _times(value: Any, factor: int) -> Any:
    return None if value is None else value * factor


def _rank0_note(kept_from: float, world: int) -> str:
    when = datetime.fromtimestamp(kept_from, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"rank 0 only: the other ranks' steps before {when} are past the raw window; "
            f"throughput and totals are rank 0's x {world}, spread unknown")


def _lagging_note(train: TrainView, figures: EfficiencyFigures, world: Any) -> str | None:
    """Ranks that reported steps before but none among the recent ones (their host is
    unreachable, or its records arrive late): the throughput, a sum over the ranks that
    report, then counts only some of the job and reads as a slowdown it is not."""
    recent = {r.rank for r in figures.ranks}
    missing = sorted({r["rank"] for r in train.latest if r.get("rank") is not None} - recent)
    if not recent or not missing:
        return None
    hosts = sorted({str(r["host"]) for r in train.latest if r.get("rank") in missing})
    of = f" of {world}" if isinstance(world, int) and world >= len(recent) else ""
    return (f"{'rank' if len(missing) == 1 else 'ranks'} {', '.join(map(str, missing))} "
            f"({', '.join(hosts)}) not in the recent steps (records late or host "
            f"unreachable): throughput counts {len(recent)}{of} ranks")


def _figures(run: Mapping[str, Any], train: TrainView, gpus: Sequence[Mapping[str, Any]],
             rank0_for: int | None = None) -> EfficiencyFigures:
    """The efficiency figures of the ranks read; with `rank0_for`, rank 0 stands for that
    many ranks (`_rank0_alone_until`): its rates count for all, and no spread is known."""
    job_hosts = {r["host"] for r in train.latest}
    utils = [g.get("util") for g in gpus if not job_hosts or g["host"] in job_hosts]
    n_gpus = run.get("world_size") or (len(train.latest) or None)
    figures = compute_efficiency(
        train.samples, utils, flops_per_step=run.get("flops_per_step"),
        peak_flops=run.get("peak_flops"), n_gpus=n_gpus,
    )
    if rank0_for is None:
        return figures
    return dataclasses.replace(
        figures, samples_per_s=_times(figures.samples_per_s, rank0_for),
        tokens_per_s=_times(figures.tokens_per_s, rank0_for), step_time_spread=None, slowest=(),
    )


def _efficiency(train: TrainView, figures: EfficiencyFigures, series: Mapping[str, Series],
                busy: Series, note: str | None = None) -> Efficiency:
    throughput = Series()
    times = series.get("step_time")
    if times is not None:
        # Against step, not time: the per-step series is kept pre-aggregated (levels).
        # A record's step time covers the steps it stands for (the newest record's
        # count: a trainer logs at a fixed interval); steps/s when samples are not
        # reported.
        per_step = (train.global_samples or 1) * train.record_steps
        throughput = Series(
            times.x,
            tuple(_per(per_step, t) for t in times.last),
            tuple(_per(per_step, t) for t in times.hi),
            tuple(_per(per_step, t) for t in times.lo),
        )
    return Efficiency(
        gpu_busy=figures.gpu_busy,
        samples_per_s=figures.samples_per_s,
        tokens_per_s=figures.tokens_per_s,
        data_wait_pct=figures.data_wait_pct,
        comm_pct=figures.comm_pct,
        mfu=figures.mfu,
        step_time_median=figures.step_time_median,
        step_time_spread=figures.step_time_spread,
        slowest_ranks=tuple(RankTime(r.rank, r.host, r.own_time) for r in figures.slowest),
        throughput_history=throughput,
        gpu_busy_history=busy,
        note=note,
    )


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _read_pool() -> ThreadPoolExecutor:
    """Threads for a snapshot's independent store reads, shared by every source."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=READ_THREADS,
                                       thread_name_prefix="snapshot-read")
        return _POOL


def _per(units: float, seconds: float | None) -> float | None:
    return units / seconds if seconds else None


def _health(hosts: Sequence[Mapping[str, Any]], gpus: Sequence[Mapping[str, Any]],
            samples: Sequence[Mapping[str, Any]], xids: Sequence[Mapping[str, Any]],
            interruptions: Sequence[Mapping[str, Any]], host_states: Mapping[str, str] | None,
            now: float, replaying: bool, ended: bool = False) -> Health:
    by_gpu = {(g["host"], g["gpu"]): g for g in gpus}
    by_host = {s["host"]: s for s in samples}
    newest_xid: dict[tuple[str, Any], int] = {}
    for e in sorted(xids, key=lambda e: e["ts"]):
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        if isinstance(data.get("xid"), int):
            newest_xid[(e["host"], data.get("gpu"))] = data["xid"]
    out = []
    simulated = False
    for h in hosts:
        name = h["host"]
        inventory = {g.get("index"): g for g in h.get("gpus") or [] if isinstance(g, dict)}
        indexes = sorted(set(inventory) | {i for (hn, i) in by_gpu if hn == name},
                         key=lambda i: (i is None, i))
        cells = []
        for index in indexes:
            inv = inventory.get(index, {})
            g = by_gpu.get((name, index), {})
            sim = bool(g.get("sim") or inv.get("simulated") or h.get("gpu_source") == "sim")
            simulated = simulated or sim
            cells.append(GpuCell(
                index=int(index) if index is not None else -1,
                online=bool(g),
                simulated=sim,
                util=g.get("util"),
                temp=g.get("temp"),
                power=g.get("power"),
                power_limit=g.get("power_limit"),
                mem_used=g.get("mem_used"),
                mem_total=g.get("mem_total") or inv.get("mem_total"),
                ecc_unc=g.get("ecc_vol_unc"),
                xid=newest_xid.get((name, index)),
                throttle=g.get("throttle"),
                name=inv.get("name"),
            ))
        s = by_host.get(name, {})
        out.append(HostHealth(
            host=name,
            state=link_state(h, host_states, now, replaying, ended=ended),
            gpu_state=h.get("gpu_state") or "unknown",
            gpus=tuple(cells),
            cpu=s.get("cpu"),
            mem_used=s.get("mem_used"),
            mem_total=s.get("mem_total") or h.get("mem_total"),
            disk_used=s.get("disk_used"),
            disk_total=s.get("disk_total"),
            net_rx=s.get("net_rx"),
            net_tx=s.get("net_tx"),
            last_seen=h.get("last_seen"),
        ))
    return Health(
        hosts=tuple(out),
        interruptions=tuple(
            Interruption(
                cause=str(i.get("cause") or "unknown"),
                detected_at=float(i["detected_at"]),
                recovered_in=i.get("recovered_in"),
                steps_lost=i.get("steps_lost"),
                restart_count=i.get("restart_count"),
                evidence=i.get("evidence"),
                hosts=tuple(i.get("hosts") or ((i["host"],) if i.get("host") else ())),
                failed_restarts=tuple(i.get("failed_restarts") or ()),
                ended_by=i.get("ended_by"),
                detection_latency=i.get("detection_latency"),
            )
            for i in interruptions if i.get("detected_at") is not None
        ),
        simulated=simulated,
    )


def _first_seen(reader: StoreReader, job: str | None, alerts: Sequence[Alert],
                at: float) -> list[Alert]:
    """Alerts dated now, for want of a better time (the loss findings: spikes, divergence,
    LR), keep the time they were first found: re-dated at every refresh they read as
    new. A condition that ends is forgotten, so one that comes back is dated anew. Live
    only: a replay or a report dates them at its cursor, the same on every read."""
    held = reader.recall("alerts_first_seen")
    seen: dict[tuple[str, str], float] = dict(held[1]) if held and held[0] == job else {}
    out = []
    for alert in alerts:
        key = (alert.code, alert.where)
        if alert.ts == at:
            first = seen.get(key)
            if first is not None and first <= at:
                alert = dataclasses.replace(alert, ts=first)
            else:
                seen[key] = at
        out.append(alert)
    live = {(a.code, a.where) for a in alerts}
    reader.remember("alerts_first_seen", job, {k: v for k, v in seen.items() if k in live})
    return out


def _signal_alerts(reader: StoreReader, job: str | None, until_ts: float | None,
                   fr: Frontiers, train: TrainView, series: Mapping[str, Series],
                   effect: Effect, incidents: Sequence[Interruption], at: float
                   ) -> list[Alert]:  # fmt: skip
    """Each interruption with its cause, where and what to try (resolved ones too), and
    the slow training signals (loss scale, gradient norm, plateau)."""
    if job is None:
        return []
    events = [e for e in _lifecycle_events(reader, job, fr, until_ts)
              if e.get("kind") == "interruption" and e.get("job") == job]
    memory: dict[str, tuple[float, float]] = {}
    for e in events:
        if event_data(e).get("cause") == "oom" and e.get("host"):
            host, when = str(e["host"]), float(e.get("ts") or at)
            memory[host] = reader.memo(f"oom-memory:{host}:{when}", when,
                                       lambda host=host, when=when: _peak_memory(
                                           reader, host, when))
    micro = [int(r["samples"]) // max(int(r.get("steps") or 1), 1) for r in train.latest
             if isinstance(r.get("samples"), int) and r["samples"] > 0]
    return [
        *signal_alerts.interruption_alerts(
            events, incidents, now=at, micro_batch=max(micro) if micro else None,
            memory={h: m for h, m in memory.items() if m is not None}),
        *signal_alerts.loss_scale_alerts(series.get("loss_scale", Series()), now=at),
        *signal_alerts.grad_norm_alerts(series.get("grad_norm", Series()), now=at),
        *signal_alerts.plateau_alerts(effect.train_loss_ema, now=at),
    ]


def _peak_memory(reader: StoreReader, host: str, until: float) -> tuple[float, float] | None:
    """The most GPU memory any GPU of `host` held up to `until`, and its total."""
    used, total = reader.series_columns("gpu", ("mem_used", "mem_total"), where={"host": host},
                                        x="ts", buckets=1, until_ts=until)
    peaks = [v for v in used.hi if v is not None]
    totals = [v for v in total.hi if v is not None]
    return (max(peaks), max(totals)) if peaks and totals else None


def _first_wire_errors(reader: StoreReader, hosts: Sequence[Mapping[str, Any]],
                       until_ts: float | None) -> dict[str, tuple[float, int]]:
    """Read only when a host has had a record rejected or stored without some values:
    almost never."""
    bad = tuple(sorted((str(h["host"]), h.get("malformed"), h.get("last_error"))
                       for h in hosts if h.get("malformed") or h.get("last_error")))
    if not bad:
        return {}
    # Read again when a host's count or newest error changes: a new one arrived.
    names = [host for host, _, _ in bad]
    return reader.memo("wire_errors", (bad, until_ts),
                       lambda: reader.first_wire_errors(names, until_ts=until_ts))


def _link_rows(hosts: Sequence[Mapping[str, Any]], health: Health) -> list[dict[str, Any]]:
    """Host rows with the state shown, and since when where the store knows it (the
    transport records each change of state)."""
    return [{**h, "state": s.state,
             "state_since": h.get("state_ts") if h.get("state") == s.state else None}
            for h, s in zip(hosts, health.hosts, strict=True)]


def _before_any_record(reader: StoreReader, until_ts: float | None, label: str,
                       host_states: Mapping[str, str] | None, controllable: bool,
                       now: float | None) -> Snapshot:
    """No record yet: the hosts and their links are all there is, and they matter most
    then (a refused host key, a wrong port, a missing agent keep every record away)."""
    at = now if now is not None else (until_ts or 0.0)
    hosts = reader.hosts(until_ts=until_ts)
    health = _health(hosts, (), (), (), (), host_states, at, replaying=until_ts is not None)
    rows = _link_rows(hosts, health)
    return Snapshot(ts=at, source_label=label, job=None, health=health,
                    alerts=rules.merge(rules.host_alerts(rows, (), now=at), rules.rejected_alerts(
                        hosts, _first_wire_errors(reader, hosts, until_ts))),
                    controllable=controllable)


def _operator_starts(started: Sequence[Mapping[str, Any]]
                     ) -> tuple[dict[str, float], dict[tuple[str, str], float]]:  # fmt: skip
    """Each job's newest start by the operator (a launch, resume, relaunch or fork), not
    by the agents' own recovery, and each (job, host)'s: only such a start ends a
    "recovery stopped" or "launch failed" alert (a peer host's restart after one host
    gave up does not make the job whole)."""
    out: dict[str, float] = {}
    on: dict[tuple[str, str], float] = {}
    for e in started:
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        job, ts = e.get("job"), float(e.get("ts") or 0.0)
        if job and data.get("reason") != "recovery":
            out[job] = max(out.get(job, 0.0), ts)
            key = (job, str(e.get("host") or ""))
            on[key] = max(on.get(key, 0.0), ts)
    return out, on


def observed_seconds(lifecycle: Sequence[Mapping[str, Any]], job: str, since: float,
                     at: float) -> float:
    """The run time a job's MTBF is measured over: while its processes ran, not the
    pauses nor the recording's time after it exited (`running_seconds`); the span
    since `since` when no lifecycle event says more."""
    running = running_seconds((e for e in lifecycle if e.get("job") == job),
                              since=since, until=at)
    return at - since if running is None else running


def build_snapshot(
    reader: StoreReader,
    *,
    until_ts: float | None,
    label: str,
    buckets: int = SNAPSHOT_BUCKETS,
    host_states: Mapping[str, str] | None = None,
    controllable: bool = False,
    now: float | None = None,
    job: str | None = None,
) -> Snapshot:
    """The whole main screen at `until_ts` (None: everything recorded).

    `now` is the instant ages are measured from (time since the last step, stale hosts):
    by default the cursor, else the newest record; a live source may pass the wall clock.
    `job` is the operator's pick (`j`, `cockpit report --job`): shown while it is one of
    the recording's jobs, training or not (`TrainTail.job`).
    """
    fr = reader.frontiers(until_ts=until_ts)
    frontier = fr.newest
    if frontier is None:
        return _before_any_record(reader, until_ts, label, host_states, controllable, now)
    at = now if now is not None else (until_ts if until_ts is not None else frontier)
    tail = reader.memo("train_tail", None, lambda: TrainTail(reader))
    training = tail.training(fr, until_ts)
    declared = reader.memo("jobs", fr.key("run", "event", "eval"),
                           lambda: tuple(reader.jobs(until_ts=until_ts)))
    jobs = (*declared, *(j for j in training if j not in declared))
    job = tail.job(fr, until_ts, prefer=job, training=training, known=jobs)
    if job is not None and job not in jobs:
        jobs = (*jobs, job)
    run = reader.memo("run_info", (job, fr.key("run", "event", "hello")),
                      lambda: reader.run_info(job, until_ts=until_ts)) if job else {}
    # The reads below do not depend on one another's answers: DuckDB runs them side by
    # side (it releases the GIL) while this thread reads the steps the panes build on.
    pool = _read_pool()
    gpus_f = pool.submit(reader.memo, "gpus", fr.key("gpu"),
                         lambda: reader.latest_gpus(until_ts=until_ts, frontiers=fr))
    host_samples_f = pool.submit(
        reader.memo, "host_samples", fr.key("host_sample"),
        lambda: reader.latest_host_samples(until_ts=until_ts, frontiers=fr))
    busy_f = pool.submit(
        reader.series_columns_held, "gpu_busy", "gpu", ("util",), where={}, x="ts",
        buckets=buckets, until_ts=until_ts, frontiers=fr)
    nonfinite_f = pool.submit(_nonfinite, reader, job, until_ts, fr) if job else None
    reads = [f for f in (gpus_f, host_samples_f, busy_f, nonfinite_f) if f is not None]
    try:
        world = run.get("world_size")
        kept_from = _rank0_alone_until(reader, job, world, until_ts)
        # Before the other ranks' kept steps, rank 0 is all there is to find.
        train = (tail.view(job, 1, fr, until_ts) if kept_from is not None
                 else tail.view(job, world, fr, until_ts, run.get("world_since")))
        if kept_from is not None:
            train = _whole_job(train, world)
        series = _train_series(reader, job, train, until_ts, buckets, fr)
        gpus = gpus_f.result()
        host_samples = host_samples_f.result()
        hosts = reader.hosts(until_ts=until_ts, frontiers=fr,
                             recent=_newest_per_host(gpus, host_samples, train.latest))
        state = _state(reader, job, until_ts,
                       float(train.newest["ts"]) if train.newest else None, fr)
        figures = reader.memo(
            "figures", (job, run.get("world_size"), run.get("world_since"),
                        run.get("flops_per_step"), run.get("peak_flops"),
                        fr.key("train", "gpu"), kept_from),
            lambda: _figures(run, train, gpus, world if kept_from is not None else None))
        stall = detect_stall(
            since_last_step=(at - float(train.newest["ts"])) if train.newest else None,
            recent_wall_times=train.walls,
            steps_per_record=train.record_steps,
            ranks=figures.ranks,
            hosts=_pressure(hosts, host_samples, gpus),
            active=state in ACTIVE_STATES,
        )
        progress = _progress(run, train, at, state, stall,
                             _resume_step(job_lifecycle(reader, job, fr, until_ts))
                             if job is not None and state == "paused" else None,
                             _lifecycle_events(reader, job, fr, until_ts)
                             if job is not None and state in ("exited", "failed") else ())
        nonfinite = nonfinite_f.result() if nonfinite_f is not None else NonFinite()
        found = _effect(reader, job, train, until_ts, buckets, fr, series, nonfinite)
        efficiency = _efficiency(train, figures, series, busy_f.result()[0],
                                 _rank0_note(kept_from, world) if kept_from is not None
                                 else _lagging_note(train, figures, world))
        others = [j for j in training if j != job]
        if progress.state in ENDED_STATES and others:
            # The hosts' GPUs now work for another job: their use is not this one's.
            efficiency = dataclasses.replace(
                efficiency, gpu_busy=None,
                note=efficiency.note or f"GPU busy not shown: job {job} is {progress.state} "
                                        f"and the hosts' GPUs now serve {', '.join(others)}")
    except BaseException:
        # The store cannot close while a read still runs (a damaged file fails one read
        # and the caller closes it): let the others finish before passing the error on.
        wait(reads)
        raise
    events_key = fr.key("event")
    xids = reader.memo("xids", events_key,
                       lambda: reader.gpu_events(until_ts=until_ts, frontiers=fr))
    interruptions = reader.memo(
        "interruptions", (job, events_key),
        lambda: merge_incidents(reader.interruptions(job, until_ts=until_ts))) if job else []
    health = _health(hosts, gpus, host_samples, xids, interruptions, host_states, at,
                     replaying=until_ts is not None,
                     ended=until_ts is not None and recording_ended(reader, until_ts))
    if job is not None:
        checkpoints = reader.memo(
            "checkpoint_costs", (job, events_key),
            lambda: reader.checkpoint_costs(job, until_ts=until_ts))
        started = run.get("started") if isinstance(run, dict) else None
        first = reader.memo("first_ts", (job, fr.key("hello")),
                            lambda: (reader.time_range() or (at, at))[0])
        lifecycle = _lifecycle_events(reader, job, fr, until_ts)
        advice = advise(
            checkpoint_seconds=[c["seconds"] for c in checkpoints],
            checkpoint_ts=[c["ts"] for c in checkpoints],
            interruptions=len(health.interruptions),
            observed_seconds=observed_seconds(lifecycle, job, started or first or at, at),
            starts=process_starts(lifecycle, job),
        )
        health = dataclasses.replace(health, checkpoint_advice=advice.text)
    events = reader.memo(
        "events", events_key,
        lambda: reader.events(until_ts=until_ts, limit=EVENTS_SHOWN, frontiers=fr))
    data_events = reader.memo(
        "data_events", events_key,
        lambda: reader.events(until_ts=until_ts, kinds=DATA_EVENT_KINDS,
                              limit=DATA_EVENTS_READ, frontiers=fr))
    # An earlier run filed away by a fresh launch of its name is over: its alerts do not
    # stand against the new run (they stay in its own report).
    stored_alerts = reader.memo(
        "alerts", (fr.key("alert"), events_key, job),
        lambda: rules.stored_alerts([a for a in reader.alerts(until_ts=until_ts, frontiers=fr)
                                     if a.get("job") == job or not is_earlier_run(a.get("job"))],
                                    *_operator_starts(reader.events(
                                        until_ts=until_ts, kinds=("job_started",),
                                        limit=STARTS_READ, frontiers=fr))))
    worst = max(figures.ranks, key=lambda r: r.data_share or 0.0, default=None)
    link_rows = _link_rows(hosts, health)
    alerts = rules.merge(
        stored_alerts,
        rules.gpu_alerts(gpus),
        rules.xid_alerts(xids),
        rules.host_alerts(link_rows, host_samples, now=at),
        rules.data_alerts(
            data_wait_pct=figures.data_wait_pct,
            worst=(worst.rank, worst.host, worst.data_share or 0.0) if worst else None,
            events=data_events,
            now=at,
        ),
        rules.parameter_alerts(
            nonfinite_steps=found.effect.nonfinite_steps,
            nonfinite_count=found.effect.nonfinite_count,
            nonfinite_last=found.effect.nonfinite_last,
            nonfinite_since=nonfinite.since,
            spike_steps=found.effect.spike_steps,
            divergence=found.divergence, lr_reason=found.lr_reason, now=at,
        ),
        rules.interruption_alerts(health.interruptions, gave_up=state == "failed"),
        rules.run_change_alerts(run.get("changes") or ()),
        rules.rejected_alerts(hosts, _first_wire_errors(reader, hosts, until_ts)),
        rules.stall_alerts(stall, now=at,
                           since=float(train.newest["ts"]) if train.newest else None),
        _signal_alerts(reader, job, until_ts, fr, train, series, found.effect,
                       health.interruptions, at),
    )
    if until_ts is None and not reader.static:  # live: a replay must read the same twice
        alerts = rules.merge(_first_seen(reader, job, alerts, at))
    return Snapshot(
        ts=at,
        source_label=label,
        job=job,
        jobs_training=training,
        jobs=jobs,
        progress=progress,
        effect=found.effect,
        efficiency=efficiency,
        health=health,
        alerts=alerts,
        events=event_rows(events),  # oldest first
        controllable=controllable,
    )
