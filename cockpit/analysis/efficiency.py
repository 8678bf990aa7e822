"""Is the compute used: throughput, where the step time goes, stragglers, MFU.

Throughput is summed per rank (each rank's samples over its own step time) so a window
that cuts a step in half on some ranks does not bias it. MFU follows the usual
definition, achieved FLOP/s over the peak of all devices:
``flops_per_step * steps_per_second / (peak_flops * n_gpus)``, with `flops_per_step`
the FLOPs of one global optimizer step, `peak_flops` per device and `steps_per_second`
the steps done per second of wall time (the mean step's rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.ranks import (
    RankSummary,
    StepSample,
    rank_window,
    step_walls,
    steps_per_second,
)
from cockpit.analysis.stats import finite, median

TOP_SLOWEST = 3
# A rank is named among the slowest only when its own time is this much above the
# fastest rank's: ranks within it are even, and naming the first few of them as the
# slowest would point at ranks nobody waits for.
EVEN_WITHIN = 0.02
# A rank this far behind the fastest (or a spread this wide) holds every step back by a
# fifth or more: shown as a warning.
FAR_BEHIND = 0.2


def slowest_first(r: RankSummary) -> tuple[float, int]:
    """The order ranks are named in: the slowest own time first, then by rank."""
    return (-r.own_time, r.rank)


def lag_verdict(behind: float | None) -> str:
    """"far" (`FAR_BEHIND` or more), "behind" (more than `EVEN_WITHIN`) or "even": how far
    a rank's own time is behind the fastest rank's (`behind`: its ratio less 1), or how
    wide the ranks' spread is; "even" where not known."""
    if behind is None or behind <= EVEN_WITHIN:
        return "even"
    return "far" if behind >= FAR_BEHIND else "behind"


@dataclass(frozen=True)
class EfficiencyFigures:
    gpu_busy: float | None = None  # mean SM util %, over the given GPUs
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    steps_per_s: float | None = None
    data_wait_pct: float | None = None
    comm_pct: float | None = None
    mfu: float | None = None
    step_time_median: float | None = None
    step_time_spread: float | None = None  # (slowest - fastest own time) / median own time
    slowest: tuple[RankSummary, ...] = ()
    ranks: tuple[RankSummary, ...] = ()


def _pct(totals: tuple[float, float] | None) -> float | None:
    return None if totals is None else 100.0 * totals[0] / totals[1]


def compute_efficiency(
    steps: Sequence[StepSample],
    gpu_utils: Sequence[float | None] = (),
    *,
    flops_per_step: float | None = None,
    peak_flops: float | None = None,
    n_gpus: int | None = None,
    top: int = TOP_SLOWEST,
    walls: tuple[Sequence[float], Sequence[int]] | None = None,
) -> EfficiencyFigures:
    """`walls`: `step_walls(steps)`, where the caller has it already (a snapshot's
    training view holds it), as working it out again is most of this function's time."""
    utils = finite(gpu_utils)
    busy = sum(utils) / len(utils) if utils else None
    ranks, totals = rank_window(steps)
    if not ranks:
        return EfficiencyFigures(gpu_busy=busy)
    wall = median([r.step_time for r in ranks])
    # Achieved FLOP/s are of the job's wall time, its slow steps (checkpoints,
    # evaluations) included: the mean step's rate, as its throughput and ETA read it,
    # not the median step's, which left them out and overstated MFU.
    speed = steps_per_second(*(step_walls(steps) if walls is None else walls))
    own = [r.own_time for r in ranks]
    own_mid = median(own)
    spread = (max(own) - min(own)) / own_mid if len(ranks) > 1 and own_mid > 0 else None
    behind = [r for r in ranks if r.own_time > min(own) * (1 + EVEN_WITHIN)]
    slowest = tuple(sorted(behind, key=slowest_first)[:top])
    mfu = None
    if flops_per_step and peak_flops and n_gpus and speed is not None:
        mfu = flops_per_step * speed / (peak_flops * n_gpus)
    return EfficiencyFigures(
        gpu_busy=busy,
        samples_per_s=totals.samples_per_s,
        tokens_per_s=totals.tokens_per_s,
        steps_per_s=speed,
        data_wait_pct=_pct(totals.data),
        comm_pct=_pct(totals.comm),
        mfu=mfu,
        step_time_median=wall,
        step_time_spread=spread,
        slowest=slowest,
        ranks=tuple(ranks),
    )
