"""The Effect pane's part of a snapshot: is the model learning? The loss (raw and
smoothed), the evaluations, the LR with the operator's changes, spikes pinned to their
step, NaN/Inf steps and the chart markers (restarts, adjustments), and the hardware
and link faults at the steps the job trained when each was seen (`fault_markers`).

Evaluations, markers and NaN/Inf steps are kept between refreshes and extended from the
rows added since (`StoreReader.kept`): a job evaluates and checkpoints for days."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from agent.wire.events import XID
from cockpit.analysis.divergence import (
    BestValidation,
    Divergence,
    best_validation,
    divergence_after,
)
from cockpit.analysis.lr import (
    lr_adjustment_steps,
    lr_changes,
    lr_looks_too_high,
    scale_in_force,
)
from cockpit.analysis.markers import MARKER_KINDS, RESTART, chart_markers
from cockpit.analysis.smoothing import ema
from cockpit.analysis.spikes import find_spikes
from cockpit.analysis.timeline import (
    HARMFUL_THROTTLE,
    Fault,
    GpuState,
    fault_rows,
    gpu_faults,
    link_faults,
    on_hosts,
    place,
    xid_faults,
)
from cockpit.read.train_tail import TrainView, job_hosts
from cockpit.snapshot import (
    Effect,
    Marker,
    Series,
)
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_train import NonFinite

MAX_PINNED_SPIKES = 20
# Faults of each source kept between refreshes, the newest: a GPU whose throttling comes
# and goes for days must not grow the answer without end (the chart keeps far fewer).
FAULTS_KEPT = 5000

@dataclass(frozen=True)
class EffectFindings:
    effect: Effect
    divergence: Divergence | None
    lr_reason: str | None

@dataclass(frozen=True)
class Evals:
    """The evaluations' share of the Effect pane: changes only when one is added."""

    points: list[tuple[int, float | None]]
    series: Series
    last_finite: float | None
    best: BestValidation | None

def read_evals(reader: StoreReader, job: str, until_ts: float | None, buckets: int,
           fr: Frontiers) -> Evals:
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
    return Evals(
        points=points,
        series=thin([(float(s), v) for s, v in points], buckets),
        last_finite=finite_val[-1] if finite_val else None,
        best=best_validation(points),
    )

# What the panes draw per step (and the gradient norm, which the alerts watch).
TRAIN_SERIES = ("loss", "lr", "loss_scale", "grad_norm", "step_time")

def train_series(reader: StoreReader, job: str | None, train: TrainView,
                  until_ts: float | None, buckets: int, fr: Frontiers) -> dict[str, Series]:
    """The reference rank's step series, read together (one x range, one statement).

    Without a reference rank (no rank reported) the effect series are drawn over the
    whole job and there is no throughput history, as each pane would read them alone.
    """
    if job is None or train.newest is None:
        return {}
    where: dict[str, Any] = {"job": job}
    columns: tuple[str, ...] = TRAIN_SERIES[:4]
    if train.ref_rank is not None:
        where["rank"] = train.ref_rank
        columns = TRAIN_SERIES

    found = reader.series_columns_held("train_series", "train", columns, where=where,
                                       x="step", buckets=buckets, until_ts=until_ts,
                                       frontiers=fr)
    return dict(zip(columns, found, strict=True))

def build_effect(reader: StoreReader, job: str | None, train: TrainView, until_ts: float | None,
            buckets: int, fr: Frontiers, series: Mapping[str, Series],
            nonfinite: NonFinite) -> EffectFindings:
    if job is None:
        return EffectFindings(Effect(), None, None)
    loss = series.get("loss", Series())
    lr = series.get("lr", Series())
    scale = series.get("loss_scale", Series())
    smoothed = Series(loss.x, tuple(ema(loss.last)), loss.lo, loss.hi)
    evals = reader.memo("evals", (job, buckets, fr.key("eval")),
                        lambda: read_evals(reader, job, until_ts, buckets, fr))
    spikes = pin_spikes(reader, job, train.ref_rank, loss,
                         find_spikes(loss.x, loss.last, loss.hi), until_ts)
    divergence = divergence_after(evals.best,
                                  list(zip(smoothed.x, smoothed.last, strict=True)))
    markers = chart_markers_of(reader, job, until_ts, fr)
    # A resume (a fork's start included: it resumes its parent's checkpoint) restarts
    # the curve the LR rule reads.
    restarts = [m.step for m in markers if m.kind == RESTART]
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
        lr_changes=lr_changes(markers, lr_around(reader, job, train.ref_rank, markers,
                                                  until_ts, fr)),
    )
    return EffectFindings(effect, divergence, lr_reason)

def lr_around(reader: StoreReader, job: str, rank: int | None, markers: Sequence[Marker],
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

def chart_markers_of(reader: StoreReader, job: str, until_ts: float | None,
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

def nonfinite_steps(reader: StoreReader, job: str, until_ts: float | None,
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

def pin_spikes(reader: StoreReader, job: str, rank: int | None, loss: Series,
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
    return tuple(v if (v := known[k]) is not None else int(k[1]) for k in keys)

def thin(points: list[tuple[float, float | None]], buckets: int) -> Series:
    """Evaluations are few; keep them all unless there are more than `buckets`."""
    if len(points) > buckets > 0:
        stride = math.ceil(len(points) / buckets)
        points = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
    return Series(tuple(p[0] for p in points), tuple(p[1] for p in points),
                  tuple(p[1] for p in points), tuple(p[1] for p in points))


def fault_markers(reader: StoreReader, job: str | None, train: TrainView,
                  link_rows: Sequence[Mapping[str, Any]], until_ts: float | None,
                  fr: Frontiers) -> tuple[Marker, ...]:
    """The hardware and link faults (`cockpit.analysis.timeline`) on the job's hosts
    (those of its ranks' newest steps), at the steps its reference rank trained when
    each was seen. The XIDs and the GPUs' changes of state are kept and
    extended from the rows added since (`StoreReader.kept`); the link rows are the
    hosts as shown (`state`) with since when (`state_since`)."""
    hosts = job_hosts(train)
    if job is None or not hosts:
        return ()
    # The faults of the job's hosts alone are kept (the newest FAULTS_KEPT): on a
    # shared fleet, a GPU elsewhere whose throttling comes and goes all day would
    # otherwise push the job's own faults out of what is kept.
    xids = reader.kept("fault_xids", hosts, "event", fr,
                       lambda: on_hosts(xid_faults(reader.rare_events((XID,), None, until_ts)),
                                        hosts)[-FAULTS_KEPT:],
                       lambda held, after: _more_xids(reader, held, after, until_ts, fr, hosts))
    gpus, _ = reader.kept("fault_gpus", hosts, "gpu", fr,
                          lambda: _newest_gpu_faults(gpu_faults(reader.gpu_fault_changes(
                              HARMFUL_THROTTLE, until_ts=until_ts, hosts=hosts))),
                          lambda held, after: _more_gpu_faults(reader, held, after,
                                                               until_ts, fr, hosts))
    links = link_faults({**r, "state_ts": r.get("state_since")} for r in link_rows)
    faults = [*xids, *gpus, *on_hosts(links, hosts)]
    return place(faults, _steps_at(reader, job, train.ref_rank, [f.ts for f in faults],
                                   until_ts, fr))


def _newest_gpu_faults(found: tuple[list[Fault], GpuState]) -> tuple[list[Fault], GpuState]:
    return found[0][-FAULTS_KEPT:], found[1]


def _more_xids(reader: StoreReader, held: list[Fault], after: float, until_ts: float | None,
               fr: Frontiers, hosts: frozenset[str]) -> list[Fault] | None:
    added = reader.added_rows("event", after, until_ts, fr)
    if added is None:
        return None
    # By time: a host's XID may come after another host's newer records (a late row).
    return sorted([*held, *xid_faults(sorted(
        (r for r in added if r.get("kind") == XID and r.get("host") in hosts), key=_TS_SEQ))],
                  key=_FAULT_TS)[-FAULTS_KEPT:]


# Oldest first: every GPU of a fleet adds a sample per second, sorted by a C key.
_TS_SEQ = itemgetter("ts", "seq")
_FAULT_TS = attrgetter("ts")


def _more_gpu_faults(reader: StoreReader, held: tuple[list[Fault], GpuState], after: float,
                     until_ts: float | None, fr: Frontiers, hosts: frozenset[str]
                     ) -> tuple[list[Fault], GpuState] | None:  # fmt: skip
    added = reader.added_rows("gpu", after, until_ts, fr)
    if added is None:
        return None
    ours = [r for r in added if r["host"] in hosts]
    found, state = gpu_faults(sorted(fault_rows(ours, held[1]), key=_TS_SEQ), held[1])
    return sorted([*held[0], *found], key=_FAULT_TS)[-FAULTS_KEPT:], state


def _steps_at(reader: StoreReader, job: str, rank: int | None, stamps: list[float],
              until_ts: float | None, fr: Frontiers) -> dict[float, int | None]:
    """The step trained at each instant. Once a record of the rank lies after an
    instant its step stands for good, and is kept; only instants newer than the rank's
    newest record (a fault seen this refresh) are read again, when a record is added."""
    held = reader.recall("fault_steps")
    known: dict[float, int | None] = held[1] if held is not None and held[0] == (job, rank) \
        else {}
    settled = fr.ts.get("train")
    missing = sorted({ts for ts in stamps if ts not in known})
    if missing:
        found = reader.memo("fault_steps_missing", (job, rank, tuple(missing), fr.key("train")),
                            lambda: reader.steps_at(job, rank, missing, until_ts=until_ts))
        # An instant after the newest record may yet gain a step: asked again later.
        keep = {ts: step for ts, step in found.items()
                if settled is not None and ts < settled}
        wanted = set(stamps)  # a fault no longer kept needs no step
        reader.remember("fault_steps", (job, rank),
                        {ts: step for ts, step in {**known, **keep}.items() if ts in wanted})
        known = {**known, **found}
    return {ts: known.get(ts) for ts in stamps}
