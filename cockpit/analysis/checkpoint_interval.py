"""How often to checkpoint: Young's and Daly's optimum intervals.

With checkpoint cost δ (seconds to write one) and mean time between failures M, Young
(1974) gives the first-order optimum compute time between checkpoints τ = sqrt(2δM).
Daly (2006) refines it to the higher-order form

    τ = sqrt(2δM) · [1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ     for δ < 2M
    τ = M                                                              for δ ≥ 2M

which is what `advise` uses. Worked figures (δ = 5 min): M = 24 h gives τ ≈ 116.7 min
(Young alone: 120 min, or 115 min with the "− δ" shortcut), M = 6 h gives τ ≈ 56.7 min
(Young: 60 / 55 min). Only Daly's form lands on ~117 and ~57 minutes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.stats import finite, median
from cockpit.analysis.text import counted


def young_interval(cost: float, mtbf: float) -> float:
    _check(cost, mtbf)
    return math.sqrt(2.0 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    _check(cost, mtbf)
    if cost >= 2.0 * mtbf:
        return mtbf
    ratio = cost / (2.0 * mtbf)
    return math.sqrt(2.0 * cost * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost


def _check(cost: float, mtbf: float) -> None:
    if not (cost > 0 and mtbf > 0):
        raise ValueError(
            f"checkpoint cost and MTBF must be positive seconds, got cost={cost!r}, "
            f"mtbf={mtbf!r}"
        )


# "Now every" is the median of the newest gaps between checkpoints, not of the whole
# recording: after a relaunch with another `checkpoint.every` (or a first run of the job
# that checkpointed ten times as often) the whole run's median keeps the old cadence for
# as long again, and the advice then compares the optimum with what the job no longer
# does. Nine gaps: a "checkpoint now" request's extra one does not move it. A gap across
# a start of the job's processes (a recovery, a resume) is no gap of the cadence at all:
# it holds the outage or the pause, and with few checkpoints seen it set "now every".
RECENT_GAPS = 9


@dataclass(frozen=True)
class CheckpointAdvice:
    interval_s: float | None  # recommended compute time between checkpoints
    cost_s: float | None  # median observed checkpoint write time
    mtbf_s: float | None  # observed (or lower bound when no failure yet)
    current_interval_s: float | None  # median of the newest gaps between checkpoints
    mtbf_is_lower_bound: bool
    text: str


def advise(
    *,
    checkpoint_seconds: Sequence[float | None],
    checkpoint_ts: Sequence[float],
    interruptions: int,
    observed_seconds: float,
    starts: Sequence[float] = (),
) -> CheckpointAdvice:
    """Advice from what the recording shows; `starts`: when the job's processes started.

    M is the observed run time divided by the interruptions seen. With none seen yet, the
    run time itself is a lower bound on M, so the advice is a lower bound on the interval.
    """
    costs = [c for c in finite(checkpoint_seconds) if c > 0]
    stamps = sorted(checkpoint_ts)
    gaps = [b - a for a, b in itertools.pairwise(stamps)
            if b > a and not any(a < s < b for s in starts)][-RECENT_GAPS:]
    current = median(gaps) if gaps else None
    cost = median(costs) if costs else None
    if cost is None:
        return CheckpointAdvice(
            None, None, None, current, False,
            "no checkpoint with a recorded duration yet: cannot size the interval",
        )
    if observed_seconds <= 0:
        return CheckpointAdvice(
            None, cost, None, current, False, "no run time observed yet: cannot estimate MTBF"
        )
    lower_bound = interruptions == 0
    mtbf = observed_seconds / max(interruptions, 1)
    interval = daly_interval(cost, mtbf)
    # With M only bounded below, the optimum interval is bounded below too (τ grows with M).
    lead = "checkpoint no more often than every" if lower_bound else "checkpoint every"
    text = (
        f"{lead} {_minutes(interval)} (Daly; checkpoint cost {_duration(cost)}, MTBF "
        f"{'≥ ' if lower_bound else ''}{_hours(mtbf)}"
        + (", no interruption seen yet" if lower_bound
           else f", {counted(interruptions, 'interruption')}")
        + ")"
    )
    if current is not None:
        text += f"; now every {_minutes(current)}"
    return CheckpointAdvice(interval, cost, mtbf, current, lower_bound, text)


def _duration(seconds: float) -> str:
    """Short runs give second-scale intervals: never round them down to "0 min"."""
    if seconds < 90:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60.0:.0f} min"
    return f"{seconds / 3600.0:.1f} h"


_minutes = _duration
_hours = _duration
