"""Is the compute used: throughput, where the step time goes, stragglers, MFU.

Throughput is summed per rank (each rank's samples over its own step time) so a window
that cuts a step in half on some ranks does not bias it. MFU follows the usual
definition, achieved FLOP/s over the peak of all devices:
``flops_per_step * steps_per_second / (peak_flops * n_gpus)``, with `flops_per_step`
the FLOPs of one global optimizer step, `peak_flops` per device and `steps_per_second`
the steps done per second of wall time (the mean step's rate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.ranks import (
    RankSummary,
    StepSample,
    rank_window,
    step_walls,
    steps_per_second,
)
from cockpit.analysis.stats import finite, median
from cockpit.snapshot import Efficiency

TOP_SLOWEST = 3
# A rank is named among the slowest only when its own time is this much above the
# fastest rank's: ranks within it are even, and naming the first few of them as the
# slowest would point at ranks nobody waits for.
EVEN_WITHIN = 0.02
# A rank this far behind the fastest (or a spread this wide) holds every step back by a
# fifth or more: shown as a warning.
FAR_BEHIND = 0.2


# A gauge's level: its reading is good, to watch, or bad.
GOOD, WARN, BAD = "good", "warn", "bad"
# The gauges' good and bad readings (% each), common rules of thumb for large-model
# training; higher is better for GPU busy and MFU, lower for the waits. Data wait is
# bad where its alert is raised (`alert_config`'s data_wait_warn_pct).
BUSY_GOOD_PCT, BUSY_BAD_PCT = 80.0, 50.0
DATA_WAIT_GOOD_PCT = 5.0
COMM_GOOD_PCT, COMM_BAD_PCT = 15.0, 40.0
MFU_GOOD_PCT, MFU_BAD_PCT = 35.0, 15.0


def gauge_level(value: float | None, good: float, bad: float, *,
                higher_is_better: bool) -> str | None:
    """`GOOD`, `WARN` or `BAD` for a reading between its `good` and `bad` levels (each
    included: at `bad` it is bad, which wins where the two cross); None where not known."""
    if value is None:
        return None
    if higher_is_better:
        return BAD if value <= bad else GOOD if value >= good else WARN
    return BAD if value >= bad else GOOD if value <= good else WARN


def with_gauge_levels(e: Efficiency) -> Efficiency:
    """`e` with each gauge's level (`gauge_level`) set from its figure: GPU busy, data
    wait (bad from the alert threshold in force), communication and MFU."""
    return dataclasses.replace(
        e,
        gpu_busy_level=gauge_level(e.gpu_busy, BUSY_GOOD_PCT, BUSY_BAD_PCT,
                                   higher_is_better=True),
        data_wait_level=gauge_level(e.data_wait_pct, DATA_WAIT_GOOD_PCT,
                                    limits().data_wait_warn_pct, higher_is_better=False),
        comm_level=gauge_level(e.comm_pct, COMM_GOOD_PCT, COMM_BAD_PCT, higher_is_better=False),
        mfu_level=gauge_level(None if e.mfu is None else e.mfu * 100, MFU_GOOD_PCT,
                              MFU_BAD_PCT, higher_is_better=True),
    )


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
