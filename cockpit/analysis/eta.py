"""How far along the job is and when it will end, from its recent speed.

The ETA is an *estimate*: it assumes the next steps take as long as the recent ones.
Its centre is their mean, not their median: the occasional slow step (a checkpoint, an
evaluation) recurs and takes real time, and the mean is what the job's throughput (samples
per second of wall time) reads too, so the two figures agree. Rather than pretend to
precision, it comes with a band: how fast the job went over recent stretches of steps
(the 10th..90th percentile of the stretches' mean step times). A band from single steps
would say "as if every step were as slow as the 90th-percentile one" and, when a rare slow
step recurs (a checkpoint every 50 steps), leave the mean above its top. A job whose
speed drifts (throttling, a slow rank) shows a wide band; a steady one a narrow band.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.stats import quantile

BAND = (0.1, 0.9)
MIN_SAMPLES_FOR_BAND = 3
MIN_STRETCH = 3  # steps per stretch, at least: one step's time is no speed
MAX_STRETCHES = 8


@dataclass(frozen=True)
class Eta:
    seconds: float | None  # central estimate, None when the total is unknown
    low: float | None
    high: float | None
    steps_per_second: float | None


def progress_fraction(
    *,
    step: int | None,
    total_steps: int | None,
    samples: int | None = None,
    total_samples: int | None = None,
    tokens: int | None = None,
    total_tokens: int | None = None,
    epoch: float | None = None,
    total_epochs: int | None = None,
) -> float | None:
    """Fraction done in [0, 1], by the first total the run declared (steps first)."""
    for done, total in (
        (step, total_steps),
        (samples, total_samples),
        (tokens, total_tokens),
        (epoch, total_epochs),
    ):
        if done is not None and total:
            return min(max(done / total, 0.0), 1.0)
    return None


def estimate_eta(
    *, step: int | None, total_steps: int | None, recent_step_times: Sequence[float | None],
    step_counts: Sequence[int] | None = None,
) -> Eta:
    """`recent_step_times` holds the wall time of one optimizer step (seconds) per recent
    record, and `step_counts` how many steps each record covers (one each when not
    given: a trainer logging every N steps writes one record per N): the mean weighs a
    record by its steps, so the speed is the steps done over the time they took."""
    counts = step_counts if step_counts is not None else [1] * len(recent_step_times)
    pairs = [(t, max(int(n), 1)) for t, n in zip(recent_step_times, counts, strict=True)
             if t is not None and math.isfinite(t) and t > 0]
    if not pairs:
        return Eta(None, None, None, None)
    typical = sum(t * n for t, n in pairs) / sum(n for _, n in pairs)
    speed = 1.0 / typical
    if step is None or not total_steps:
        return Eta(None, None, None, speed)
    remaining = max(total_steps - step, 0)
    central = remaining * typical
    times = [t for t, _ in pairs]
    stretches = stretch_means(times, [n for _, n in pairs])
    if len(times) < MIN_SAMPLES_FOR_BAND or len(stretches) < 2:
        return Eta(central, central, central, speed)
    low = remaining * quantile(stretches, BAND[0])
    high = remaining * quantile(stretches, BAND[1])
    return Eta(central, min(low, central), max(high, central), speed)


def stretch_means(times: Sequence[float], counts: Sequence[int] | None = None) -> list[float]:
    """The mean step time of each of up to MAX_STRETCHES consecutive stretches of
    `times`, each at least MIN_STRETCH records long (the first ones one record longer
    when they do not divide evenly); a record weighs as the `counts` steps it covers."""
    weights = counts if counts is not None else [1] * len(times)
    count = min(MAX_STRETCHES, len(times) // MIN_STRETCH)
    if count < 1:
        return []
    size, extra = divmod(len(times), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        part = list(zip(times[start:end], weights[start:end], strict=True))
        out.append(sum(t * n for t, n in part) / sum(n for _, n in part))
        start = end
    return out
