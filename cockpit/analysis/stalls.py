"""Stall detection and its likely cause.

A job is *stalled* when no step has completed for much longer than its usual step time
(no progress), or when its last few steps are several times slower than the recent
norm (slowdown). The cause is the first that the telemetry supports, checked in this
order because each later one can be a symptom of an earlier one:

- straggler sync: one rank stopped at an older step, or one rank's own work is much
  longer than the others' while they wait in communication (a wait the ranks measured
  names the rank that holds them up, so it goes before the host-wide signals; a pressed
  host of that rank is part of its detail);
- resource contention: a host is short of CPU, memory, swap or disk while its GPUs idle;
- data starved: the input pipeline takes a large share of each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cockpit.analysis.alert_config import AlertThresholds
from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.ranks import RankSummary, StepSample, summarize_ranks
from cockpit.analysis.stats import finite, median
from cockpit.analysis.text import duration

STALL_FACTOR = 10.0  # no step for this many usual step times...
MIN_STALL_SECONDS = 60.0  # ...and for at least this long
SLOWDOWN_FACTOR = 2.5  # last steps this many times slower than the window's median
RECENT_STEPS = 5
# Memory and disk that press a host, and the data-loading share that starves a step,
# are the alert thresholds (`alert_config`: memory_warn, disk_critical,
# data_wait_warn_pct), an `[alerts]` file's where it sets them.
STRAGGLER_RATIO = 1.5
STRAGGLER_COMM_SHARE = 0.2
GPU_IDLE_UTIL = 50.0
CPU_BUSY_PCT = 90.0
LOAD_PER_CPU = 1.5
SWAP_USED = 0.10

DATA_STARVED = "data starved"
CONTENTION = "resource contention"
STRAGGLER = "straggler sync"


@dataclass(frozen=True)
class HostPressure:
    host: str
    cpu: float | None = None  # % of all cores
    load_per_cpu: float | None = None
    mem_frac: float | None = None
    swap_frac: float | None = None
    disk_frac: float | None = None
    gpu_util: float | None = None  # mean SM util % of its GPUs


@dataclass(frozen=True)
class StallVerdict:
    stalled: bool
    kind: str | None = None  # "no progress" or "slowdown"
    cause: str | None = None
    detail: str | None = None
    where: dict[str, object] = field(default_factory=dict)


def _data_starved_share(t: AlertThresholds) -> float:
    """The share of step time in data loading that starves a step: the data-wait alert's."""
    return t.data_wait_warn_pct / 100


def _pressures(h: HostPressure, t: AlertThresholds) -> list[str]:
    found = []
    if h.cpu is not None and h.cpu >= CPU_BUSY_PCT:
        found.append(f"CPU {h.cpu:.0f}%")
    if h.load_per_cpu is not None and h.load_per_cpu >= LOAD_PER_CPU:
        found.append(f"load {h.load_per_cpu:.1f}/CPU")
    if h.mem_frac is not None and h.mem_frac >= t.memory_warn:
        found.append(f"memory {100 * h.mem_frac:.0f}%")
    if h.swap_frac is not None and h.swap_frac >= SWAP_USED:
        found.append(f"swap {100 * h.swap_frac:.0f}%")
    if h.disk_frac is not None and h.disk_frac >= t.disk_critical:
        found.append(f"disk {100 * h.disk_frac:.0f}%")
    return found


def likely_cause(
    ranks: Sequence[RankSummary], hosts: Sequence[HostPressure], *, no_progress: bool
) -> tuple[str | None, str | None, dict[str, object]]:
    """(cause, detail, where) — cause None when the telemetry explains nothing."""
    t = limits()  # read once: the hosts' pressure and the data share are judged by it
    if no_progress and len(ranks) > 1:
        front = max(r.last_step for r in ranks)
        behind = [r for r in ranks if r.last_step < front]
        if behind and len(behind) < len(ranks):
            r = min(behind, key=lambda r: r.last_step)
            return (
                STRAGGLER,
                f"rank {r.rank} on {r.host} stopped at step {r.last_step} while others "
                f"reached {front} and wait for it in a collective",
                {"host": r.host, "rank": r.rank, "step": r.last_step},
            )
    straggler = _own_work_straggler(ranks, hosts, t)
    if straggler is not None:
        return straggler
    for h in hosts:
        pressure = _pressures(h, t)
        if pressure and (h.gpu_util is None or h.gpu_util < GPU_IDLE_UTIL):
            gpus = "n/a" if h.gpu_util is None else f"{h.gpu_util:.0f}%"
            return (
                CONTENTION,
                f"host {h.host}: {', '.join(pressure)}; its GPUs busy {gpus}",
                {"host": h.host},
            )
    shares = [r for r in ranks if r.data_share is not None]
    starved = _data_starved_share(t)
    if shares:
        mean_share = sum(r.data_share or 0.0 for r in shares) / len(shares)
        worst = max(shares, key=lambda r: r.data_share or 0.0)
        if mean_share >= starved or (worst.data_share or 0.0) >= 2 * starved:
            return (
                DATA_STARVED,
                f"data loading takes {100 * mean_share:.0f}% of step time "
                f"(worst: rank {worst.rank} on {worst.host}, {100 * (worst.data_share or 0):.0f}%)",
                {"host": worst.host, "rank": worst.rank},
            )
    return None, None, {}


def _own_work_straggler(
    ranks: Sequence[RankSummary], hosts: Sequence[HostPressure], t: AlertThresholds
) -> tuple[str, str, dict[str, object]] | None:
    """The rank whose own work (step time less its communication wait) is much longer
    than the others' while they wait in communication for it, or None.

    Both halves are needed: a rank that merely works longer, with the others not
    waiting, holds nobody up; ranks that all wait are waiting for the network."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: r.own_time)
    others = [r for r in ranks if r is not slow]
    own_mid = median([r.own_time for r in others])
    waits = finite(r.comm_share for r in others)
    if not (own_mid > 0 and slow.own_time >= STRAGGLER_RATIO * own_mid and waits
            and median(waits) >= STRAGGLER_COMM_SHARE):
        return None
    detail = (f"rank {slow.rank} on {slow.host} works {slow.own_time / own_mid:.1f}x longer "
              f"than the others, which spend {100 * median(waits):.0f}% of each step waiting "
              "in communication")
    if slow.data_share is not None and slow.data_share >= _data_starved_share(t):
        detail += f"; its data loading takes {100 * slow.data_share:.0f}% of its step"
    pressure = next((_pressures(h, t) for h in hosts if h.host == slow.host), [])
    if pressure:
        detail += f"; its host: {', '.join(pressure)}"
    return STRAGGLER, detail, {"host": slow.host, "rank": slow.rank}


def detect_stall(
    *,
    since_last_step: float | None,
    recent_wall_times: Sequence[float],
    ranks: Sequence[RankSummary],
    hosts: Sequence[HostPressure] = (),
    active: bool = True,
    steps_per_record: int = 1,
    steps: Sequence[StepSample] = (),
) -> StallVerdict:
    """`recent_wall_times`: the wall time of one optimizer step per recent record,
    oldest first; `steps_per_record`: how many steps the trainer's newest record covers
    (a trainer logging every N steps is heard from once per N steps, so the silence
    that is usual between its records is N steps long).

    `steps`: the samples `ranks` summarize. A slowdown is its last RECENT_STEPS steps
    against those before, so its cause is looked for in those steps alone: over the
    whole window a rank that turned slow a few steps ago still has the median of its
    fast steps and is not told apart (without `steps`, `ranks` is used).

    `active` is False for a job that is paused or has exited: those are not stalls.
    """
    times = [t for t in finite(recent_wall_times) if t > 0]
    if not active or not times:
        return StallVerdict(False)
    usual = median(times)
    per_record = max(int(steps_per_record), 1)
    if since_last_step is not None and since_last_step > max(
        STALL_FACTOR * usual * per_record, MIN_STALL_SECONDS
    ):
        cause, detail, where = likely_cause(ranks, hosts, no_progress=True)
        usual_text = (f"usual step {usual:.3g}s" if per_record == 1 else
                      f"usual step {usual:.3g}s, one record per {per_record} steps")
        lead = f"no step for {duration(since_last_step)} ({usual_text})"
        return StallVerdict(
            True, "no progress", cause, f"{lead}: {detail}" if detail else
            f"{lead}; nothing in the telemetry explains it: read the job log", where,
        )
    if len(times) >= 2 * RECENT_STEPS:
        before = median(times[:-RECENT_STEPS])
        now = median(times[-RECENT_STEPS:])
        if before > 0 and now >= SLOWDOWN_FACTOR * before:
            cause, detail, where = likely_cause(_recent(steps) or ranks, hosts,
                                                no_progress=False)
            lead = f"steps {now / before:.1f}x slower than usual ({now:.3g}s vs {before:.3g}s)"
            return StallVerdict(
                True, "slowdown", cause, f"{lead}: {detail}" if detail else lead, where
            )
    return StallVerdict(False)


def _recent(steps: Sequence[StepSample]) -> list[RankSummary]:
    """The ranks summarized over the newest RECENT_STEPS recorded steps only."""
    newest = set(sorted({s.step for s in steps})[-RECENT_STEPS:])
    return summarize_ranks([s for s in steps if s.step in newest])
