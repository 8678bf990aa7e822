"""The Effect pane's part of a snapshot: is the model learning? The loss (raw and
smoothed), the evaluations, the LR with the operator's changes, spikes pinned to their
step, NaN/Inf steps and the chart markers (restarts, adjustments).

Evaluations, markers and NaN/Inf steps are kept between refreshes and extended from the
rows added since (`StoreReader.kept`): a job evaluates and checkpoints for days."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from cockpit.analysis.markers import MARKER_KINDS, chart_markers
from cockpit.analysis.smoothing import ema
from cockpit.analysis.spikes import find_spikes
from cockpit.read.train_tail import TrainView
from cockpit.snapshot import (
    Effect,
    Marker,
    Series,
)
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_train import NonFinite

MAX_PINNED_SPIKES = 20

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
    columns = TRAIN_SERIES[:4]
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
    return tuple(known[k] if known[k] is not None else int(k[1]) for k in keys)

def thin(points: list[tuple[float, float | None]], buckets: int) -> Series:
    """Evaluations are few; keep them all unless there are more than `buckets`."""
    if len(points) > buckets > 0:
        stride = math.ceil(len(points) / buckets)
        points = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
    return Series(tuple(p[0] for p in points), tuple(p[1] for p in points),
                  tuple(p[1] for p in points), tuple(p[1] for p in points))
