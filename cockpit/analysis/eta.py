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

That is the compute time left. A long job is also interrupted: `with_restarts` adds the
restarts the measured interruption rate predicts at what past restarts cost, the rest of
a restart under way, and the longer (or shorter) steps after a change of world size (the
steps timed before it rescaled, `rescaled_steps`), so the band stays shown, and true,
while the job restarts (`restart_aware`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent.wire import states
from cockpit.analysis.ranks import StepSample
from cockpit.analysis.stats import quantile
from cockpit.snapshot import Interruption, Progress

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


# -- restarts and world-size changes ---------------------------------------------------
# A month-long job is interrupted: the time left is the compute time left *plus* the
# restarts it will likely suffer on the way, each costing what the past ones cost (the
# outage until the first step after it, and the steps recomputed from the checkpoint).
# The rate is measured per second the job's processes ran (an outage cannot fail), so
# over T seconds of compute about λT more interruptions are expected; the band spreads
# that count by one Poisson standard deviation (√λT) and prices the high end at the
# dearest restart seen. While the job restarts, the rest of this restart is added: what
# a restart cost on average, less the time this one has taken so far.


@dataclass(frozen=True)
class RestartHistory:
    """What the job's interruptions so far say: `count` of them over `run_seconds` of
    its processes running, and `costs`, the seconds each recovered one cost (empty
    while none has recovered)."""

    count: int
    run_seconds: float
    costs: tuple[float, ...] = ()


def restart_costs(outages: Sequence[tuple[float | None, int | None]],
                  step_seconds: float | None) -> tuple[float, ...]:
    """The cost of each recovered outage, from (seconds until its first step, steps
    recomputed) pairs: the outage plus the recomputed steps at `step_seconds` each (none
    counted when the speed is unknown). An outage not recovered has no cost yet."""
    out = []
    for recovered_in, steps_lost in outages:
        if recovered_in is None or not math.isfinite(recovered_in) or recovered_in < 0:
            continue
        redo = (steps_lost or 0) * step_seconds if step_seconds else 0.0
        out.append(recovered_in + max(redo, 0.0))
    return tuple(out)


def world_size_factor(measured_world: int | None, world: int | None,
                      measured_batch: float | None, batch: float | None) -> float:
    """How much longer a step takes at `world` ranks than it did at `measured_world`,
    when the steps were timed before a change of world size: each rank's share of a
    step's samples (`batch`: the global batch, samples per step over all ranks), now
    over then. A trainer that keeps its global batch across the change (dividing it by
    the world) makes each rank's steps longer when the world shrinks; one that keeps its
    per-rank batch (the example trainer) takes as long a step. Which one a job does is
    not guessed: 1 unless both worlds and both batches are known."""
    if not measured_world or not world or not measured_batch or not batch:
        return 1.0
    if min(measured_world, world, measured_batch, batch) <= 0:
        return 1.0
    return (batch / world) / (measured_batch / measured_world)


def per_rank_batch(samples: Sequence[StepSample]) -> float | None:
    """The samples one rank processes in one optimizer step, averaged over `samples`
    (a record covering N steps counts its samples over N); None when none says."""
    known = [s.samples / max(s.steps, 1) for s in samples if s.samples is not None]
    return sum(known) / len(known) if known else None


def rescaled_steps(samples: Sequence[StepSample], *, world: int | None,
                   world_before: int | None, world_since: float | None
                   ) -> list[StepSample]:
    """`samples` (the recent steps the ETA and the speed are measured on) with the step
    times of those taken before the job's world changed from `world_before` to `world`
    ranks (at `world_since`) scaled by `world_size_factor`: what those steps would take
    at the current world. Right after a rescale most of the window is the old world's
    steps, and a trainer that keeps its global batch would otherwise be shown at its old
    speed until the window turned over. The batches are measured, not assumed: each
    world's global batch is its ranks' per-rank batch (`per_rank_batch`, of the steps
    taken in it) times its ranks, so the factor stays 1 until the new world has stepped."""
    if world_since is None:
        return list(samples)
    before = [s for s in samples if s.ts is not None and s.ts < world_since]
    if not before:
        return list(samples)
    after = [s for s in samples if s.ts is not None and s.ts >= world_since]
    old, new = per_rank_batch(before), per_rank_batch(after)
    factor = world_size_factor(
        world_before, world,
        old * world_before if old is not None and world_before else None,
        new * world if new is not None and world else None)
    if factor == 1.0:
        return list(samples)
    return [s._replace(step_time=s.step_time * factor)
            if s.step_time is not None and s.ts is not None and s.ts < world_since else s
            for s in samples]


def with_restarts(eta: Eta, history: RestartHistory, *, restarting_for: float | None = None,
                  work_factor: float = 1.0) -> Eta:
    """`eta` (the compute time left at the recent speed) with the interruptions the job
    is likely to suffer before it ends, the rest of a restart under way (`restarting_for`:
    seconds since it began, None when the job runs) and a change of world size
    (`work_factor`, `world_size_factor`) applied."""
    if eta.seconds is None:
        return eta
    factor = work_factor if work_factor > 0 and math.isfinite(work_factor) else 1.0
    central = eta.seconds * factor
    low = (eta.low if eta.low is not None else eta.seconds) * factor
    high = (eta.high if eta.high is not None else eta.seconds) * factor
    costs = history.costs
    mean = sum(costs) / len(costs) if costs else 0.0
    dearest = max(costs) if costs else 0.0
    cheapest = min(costs) if costs else 0.0
    rate = (history.count / history.run_seconds
            if history.count > 0 and history.run_seconds > 0 else 0.0)
    central += rate * central * mean
    low += max(rate * low - math.sqrt(rate * low), 0.0) * mean
    high += (rate * high + math.sqrt(rate * high)) * dearest
    if restarting_for is not None:
        waited = max(restarting_for, 0.0)
        central += max(mean - waited, 0.0)
        low += max(cheapest - waited, 0.0)
        high += max(dearest - waited, 0.0)
    speed = (eta.steps_per_second / factor if eta.steps_per_second is not None else None)
    return Eta(central, min(low, central), max(high, central), speed)


# States in which the job's processes are coming back: after an interruption, or after
# a (re)launch before its first step. The compute time left is still known from the
# speed the job had; what it lacks is the rest of the restart.


def restarting_for(interruptions: Sequence[Interruption], now: float) -> float | None:
    """Seconds since the newest outage began, while it is neither recovered nor ended by
    the operator (None: the job is not in an outage). An outage begins at the failure,
    before its detection by `detection_latency`."""
    if not interruptions:
        return None
    newest = max(interruptions, key=lambda i: i.detected_at)
    if newest.recovered_in is not None or newest.ended_by is not None:
        return None
    return max(now - newest.detected_at + (newest.detection_latency or 0.0), 0.0)


def restart_aware(progress: Progress, interruptions: Sequence[Interruption], *,
                  run_seconds: float, now: float, work_factor: float = 1.0) -> Progress:
    """`progress` with its ETA band widened by the job's measured interruptions
    (`with_restarts`), and, during a restart, the rest of that restart added. A job
    that is not running nor restarting (paused, stalled, ended: `eta_note` set) keeps
    its reason instead."""
    if progress.eta_note is not None or progress.eta_seconds is None:
        return progress
    step_seconds = 1.0 / progress.steps_per_second if progress.steps_per_second else None
    history = RestartHistory(
        count=len(interruptions), run_seconds=run_seconds,
        costs=restart_costs([(i.recovered_in, i.steps_lost) for i in interruptions],
                            step_seconds))
    waiting = (restarting_for(interruptions, now)
               if progress.state in states.RESTARTING else None)
    eta = with_restarts(Eta(progress.eta_seconds, progress.eta_low, progress.eta_high,
                            progress.steps_per_second),
                        history, restarting_for=waiting, work_factor=work_factor)
    return dataclasses.replace(progress, eta_seconds=eta.seconds, eta_low=eta.low,
                               eta_high=eta.high)
