"""The Efficiency pane's part of a snapshot: are the GPUs used? Throughput, GPU busy,
data wait and communication shares, MFU, the step-time spread and the slowest ranks.

Past the raw window only rank 0's steps are kept (`cockpit.store.retention`); there
rank 0 stands for the whole job and the pane says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from cockpit.analysis.efficiency import (
    EfficiencyFigures,
    compute_efficiency,
    slowest_first,
    with_gauge_levels,
)
from cockpit.analysis.ranks import RankSummary
from cockpit.read.train_tail import TrainView, job_hosts
from cockpit.snapshot import (
    Efficiency,
    RankTime,
    Series,
)
from cockpit.store.queries import StoreReader

# The most ranks a snapshot lists by their time (`Efficiency.ranks`): more than a
# maximised pane's lines on a tall terminal, and a 1,024-rank job's list stays short.
RANKS_KEPT = 64


def rank0_alone_until(reader: StoreReader, job: str | None, world: Any,
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

def whole_job(train: TrainView, world: int) -> TrainView:
    """Rank 0's view with its per-step totals counted for all `world` ranks: the ranks of
    a data-parallel job each take an equal share of a step."""
    return dataclasses.replace(train, global_samples=scaled(train.global_samples, world),
                               global_tokens=scaled(train.global_tokens, world))

def scaled(value: Any, factor: int) -> Any:
    return None if value is None else value * factor

def rank0_note(kept_from: float, world: int) -> str:
    when = datetime.fromtimestamp(kept_from, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"rank 0 only: the other ranks' steps before {when} are past the raw window; "
            f"throughput and totals are rank 0's x {world}, spread unknown")

def lagging_note(train: TrainView, figures: EfficiencyFigures, world: Any) -> str | None:
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

def efficiency_figures(run: Mapping[str, Any], train: TrainView, gpus: Sequence[Mapping[str, Any]],
             rank0_for: int | None = None) -> EfficiencyFigures:
    """The efficiency figures of the ranks read; with `rank0_for`, rank 0 stands for that
    many ranks (`rank0_alone_until`): its rates count for all, and no spread is known."""
    hosts = job_hosts(train)
    utils = [g.get("util") for g in gpus if not hosts or g["host"] in hosts]
    n_gpus = run.get("world_size") or (len(train.latest) or None)
    figures = compute_efficiency(
        train.samples, utils, flops_per_step=run.get("flops_per_step"),
        peak_flops=run.get("peak_flops"), n_gpus=n_gpus, walls=(train.walls, train.wall_steps),
    )
    if rank0_for is None:
        return figures
    return dataclasses.replace(
        figures, samples_per_s=scaled(figures.samples_per_s, rank0_for),
        tokens_per_s=scaled(figures.tokens_per_s, rank0_for), step_time_spread=None, slowest=(),
    )

def build_efficiency(train: TrainView, figures: EfficiencyFigures, series: Mapping[str, Series],
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
            tuple(per_second(per_step, t) for t in times.last),
            tuple(per_second(per_step, t) for t in times.hi),
            tuple(per_second(per_step, t) for t in times.lo),
        )
    ranks = rank_times(sorted(figures.ranks, key=slowest_first)[:RANKS_KEPT], figures.ranks)
    return with_gauge_levels(Efficiency(
        gpu_busy=figures.gpu_busy,
        samples_per_s=figures.samples_per_s,
        tokens_per_s=figures.tokens_per_s,
        data_wait_pct=figures.data_wait_pct,
        comm_pct=figures.comm_pct,
        mfu=figures.mfu,
        step_time_median=figures.step_time_median,
        step_time_spread=figures.step_time_spread,
        # The slowest are the first ranks in the same order (`slowest_first`).
        slowest_ranks=ranks[:len(figures.slowest)],
        ranks=ranks,
        rank_count=len(figures.ranks),
        throughput_history=throughput,
        gpu_busy_history=busy,
        note=note,
    ))

def rank_times(shown: Sequence[RankSummary], every: Sequence[RankSummary]
               ) -> tuple[RankTime, ...]:
    """`shown` as the snapshot holds them, each with how far its own time is behind the
    fastest of `every` rank's."""
    fastest = min((r.own_time for r in every), default=None)
    return tuple(
        RankTime(r.rank, r.host, r.own_time, wall_time=r.step_time, data_share=r.data_share,
                 comm_share=r.comm_share,
                 behind=r.own_time / fastest - 1 if fastest and len(every) > 1 else None)
        for r in shown)


def per_second(units: float, seconds: float | None) -> float | None:
    return units / seconds if seconds else None
