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

from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.analysis.stats import finite, quantile

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
    *, step: int | None, total_steps: int | None, recent_step_times: Sequence[float | None]
) -> Eta:
    """`recent_step_times` holds one wall time per recent step (seconds)."""
    times = [t for t in finite(recent_step_times) if t > 0]
    if not times:
        return Eta(None, None, None, None)
    typical = sum(times) / len(times)
    speed = 1.0 / typical
    if step is None or not total_steps:
        return Eta(None, None, None, speed)
    remaining = max(total_steps - step, 0)
    central = remaining * typical
    stretches = stretch_means(times)
    if len(times) < MIN_SAMPLES_FOR_BAND or len(stretches) < 2:
        return Eta(central, central, central, speed)
    low = remaining * quantile(stretches, BAND[0])
    high = remaining * quantile(stretches, BAND[1])
    return Eta(central, min(low, central), max(high, central), speed)


def stretch_means(times: Sequence[float]) -> list[float]:
    """The mean step time of each of up to MAX_STRETCHES consecutive stretches of
    `times`, each at least MIN_STRETCH steps long (the first ones one step longer when
    they do not divide evenly)."""
    count = min(MAX_STRETCHES, len(times) // MIN_STRETCH)
    if count < 1:
        return []
    size, extra = divmod(len(times), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(sum(times[start:end]) / (end - start))
        start = end
    return out
