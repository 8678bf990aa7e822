"""Frozen view of a job at one instant: the single thing the UI renders.

Live sessions and replays both produce `Snapshot`s (built by
`cockpit.read.source.build_snapshot` from the store and the analysis functions), so the UI
has exactly one render path and cannot tell live from replay except by `source_label`.
Everything here is plain data: no DuckDB handles, no Textual types, cheap to pass
through a message queue. Series are already downsampled in SQL to a bounded number of
points, so their size does not grow with run length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from agent.wire import states

NA = None  # a field the source cannot give; widgets show "n/a"


@dataclass(frozen=True)
class Series:
    """A downsampled series: one point per bucket, x ascending."""

    x: tuple[float, ...] = ()
    last: tuple[float | None, ...] = ()  # value of the last sample in the bucket
    lo: tuple[float | None, ...] = ()  # bucket minimum
    hi: tuple[float | None, ...] = ()  # bucket maximum

    def __len__(self) -> int:
        return len(self.x)


@dataclass(frozen=True)
class RankProgress:
    """One rank's position: how far it got, how fast it goes, how far it trails."""

    rank: int
    host: str
    step: int
    steps_per_second: float | None = None  # from its median recent step time
    lag: int = 0  # steps behind the rank furthest ahead


@dataclass(frozen=True)
class StageSpan:
    """A stretch of the job's wall-clock time in one stage (`cockpit.analysis.timeline`)."""

    start: float
    end: float
    stage: str  # "start-up", "train", "eval", "checkpoint", "paused", "restarting"


@dataclass(frozen=True)
class Progress:
    stage: str | None = None
    epoch: float | None = None
    step: int | None = None
    total_steps: int | None = None
    samples: int | None = None
    tokens: int | None = None
    percent: float | None = None  # 0..100
    eta_seconds: float | None = None  # central estimate
    eta_low: float | None = None  # band from recent speed spread
    eta_high: float | None = None
    eta_note: str | None = None  # why there is no ETA although steps are known ("finished")
    steps_per_second: float | None = None
    since_last_step: float | None = None  # seconds, relative to snapshot time
    stalled: bool = False
    stall_cause: str | None = None  # "data starved", "resource contention", "straggler sync"...
    stall_detail: str | None = None
    state: str = states.UNKNOWN  # `agent.wire.states`: running, paused, stalled, exited…
    # Of a paused job: the step of the checkpoint a resume starts from. The steps trained
    # after it (up to `step`) are discarded by the resume.
    resume_step: int | None = None
    ranks: tuple[RankProgress, ...] = ()  # every rank that reported, by rank
    stages: tuple[StageSpan, ...] = ()  # the job's stages over time, oldest first


@dataclass(frozen=True)
class Marker:
    """Something done to the run at a step, to see beside the loss it changed."""

    step: int
    # "adjust" (an operator changed a lasting knob) or "restart"; and, among `faults`,
    # "xid", "ecc", "throttle" or "unreachable" (`cockpit.analysis.timeline`)
    kind: str
    text: str  # "lr_scale=0.5", "resumed from ckpt-00001000.pt at step 1000"
    host: str | None = None  # where a fault was seen
    ts: float | None = None  # when it was seen: a fault's step is the one trained then


@dataclass(frozen=True)
class LrChange:
    """An operator's change of the LR (an acknowledged `lr_scale`) and what the trainer's
    records say the LR was on either side of it (`cockpit.analysis.lr.lr_changes`)."""

    step: int  # where the trainer applied it
    text: str  # "lr_scale=0.1"
    before: float | None = None  # LR of the newest record at or before `step`
    after: float | None = None  # LR of the first record after it: the change in force


@dataclass(frozen=True)
class Effect:
    train_loss: Series = field(default_factory=Series)  # raw (bucketed)
    train_loss_ema: Series = field(default_factory=Series)  # smoothed
    val_loss: Series = field(default_factory=Series)
    loss_scale: Series = field(default_factory=Series)
    lr: Series = field(default_factory=Series)
    last_loss: float | None = None
    last_val_loss: float | None = None
    best_val_step: int | None = None
    best_val_loss: float | None = None
    divergence_step: int | None = None  # val stopped improving while train kept improving
    spike_steps: tuple[int, ...] = ()
    nonfinite_steps: tuple[int, ...] = ()  # the first NONFINITE_LIMIT NaN/Inf steps
    nonfinite_count: int = 0  # every step with a NaN/Inf loss, however many
    nonfinite_last: int | None = None  # the newest of them
    last_loss_scale: float | None = None
    markers: tuple[Marker, ...] = ()  # adjustments and restarts, by step
    last_lr: float | None = None  # the reference rank's newest recorded LR
    lr_scale: str | None = None  # the operator's scale in force (as acknowledged), if any
    lr_changes: tuple[LrChange, ...] = ()  # the operator's LR changes, by step
    # Hardware and link faults (XID, ECC, throttling, an unreachable host) at the step
    # trained when each was seen, by step: drawn with `markers` on the loss and
    # throughput charts, so a spike or a dip sits beside what caused it.
    faults: tuple[Marker, ...] = ()


@dataclass(frozen=True)
class RankTime:
    """Where one rank's recent steps went (`analysis.ranks.RankSummary`, as shown)."""

    rank: int
    host: str
    step_time: float  # its own: median of recent steps less the communication wait, s
    wall_time: float | None = None  # median of recent steps, the wait included, s
    data_share: float | None = None  # of its step time, waiting for data, 0..1
    comm_share: float | None = None  # of its step time, waiting for communication, 0..1
    behind: float | None = None  # own time over the fastest rank's, less 1 (0.12: 12 %)


@dataclass(frozen=True)
class Efficiency:
    gpu_busy: float | None = None  # mean SM util % over the job's GPUs
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    data_wait_pct: float | None = None
    comm_pct: float | None = None
    mfu: float | None = None  # 0..1, None when FLOPs/step unknown
    step_time_median: float | None = None
    step_time_spread: float | None = None  # (slowest - fastest) / median
    slowest_ranks: tuple[RankTime, ...] = ()
    # Every rank's time, slowest own time first, at most `read.efficiency.RANKS_KEPT`; and how
    # many ranks there are (the table says how many more it leaves out).
    ranks: tuple[RankTime, ...] = ()
    rank_count: int = 0
    throughput_history: Series = field(default_factory=Series)
    gpu_busy_history: Series = field(default_factory=Series)
    # Why the figures stand on fewer ranks than the job has (a replay before the other
    # ranks' kept steps), and how they were completed; None when every rank spoke.
    note: str | None = None
    # Each gauge's level, "good", "warn" or "bad", judged from its figure by the
    # thresholds in force (`analysis.efficiency.with_gauge_levels`); None where the
    # figure is unknown. A gauge without its figure shows no reading, whatever its level.
    gpu_busy_level: str | None = None
    data_wait_level: str | None = None
    comm_level: str | None = None
    mfu_level: str | None = None


class GpuCell(NamedTuple):
    """One GPU as the Health pane shows it: its newest sample, its inventory facts and its
    fault history.

    A named tuple, not a frozen dataclass like the rest of the snapshot: a fleet's
    snapshot makes one per GPU on every refresh (1,024 at 128 hosts x 8), and a tuple is
    made in one C call, a fifth of the time a frozen dataclass's `__init__` takes to set
    its 18 fields one by one. Immutable and compared by value all the same; `_replace`
    makes a changed copy."""

    index: int  # type: ignore[assignment]  # the field hides tuple.index: never called
    online: bool
    simulated: bool
    util: float | None = None
    temp: float | None = None
    power: float | None = None
    power_limit: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    ecc_unc: int | None = None
    xid: int | None = None  # most recent XID, if any
    throttle: int | None = None
    name: str | None = None
    # The GPU's fault history, kept across runs of the job (a relaunch, a fork): its
    # XIDs in the whole recording, those before the current run began, the codes seen
    # (`read.health`), and its lifetime uncorrectable ECC count (NVML's aggregate
    # counter, which a reset or reboot keeps).
    xid_count: int = 0
    xid_earlier: int = 0
    xid_codes: tuple[int, ...] = ()
    xid_earlier_last: float | None = None
    ecc_lifetime: int | None = None
    # Whether this GPU's XIDs reach the agent (its hello says, per GPU: NVML's event API
    # where the GPU takes it): without one, True reads "none", anything else "n/a".
    xid_watched: bool | None = None


@dataclass(frozen=True)
class HostHealth:
    host: str
    state: str  # transport state: connecting, streaming, stale, unreachable, ...
    gpu_state: str  # "ok", "no NVIDIA driver", "simulated", ...
    gpus: tuple[GpuCell, ...] = ()
    cpu: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    disk_used: int | None = None
    disk_total: int | None = None
    net_rx: float | None = None
    net_tx: float | None = None
    last_seen: float | None = None  # ts of the newest record
    # The jump host (`user@address:port`) the link's last failure says is down in front
    # of this host: unreachable then through no fault of its own (None: none said so).
    behind: str | None = None


@dataclass(frozen=True)
class Interruption:
    cause: str
    detected_at: float
    recovered_in: float | None  # seconds, None while not recovered
    steps_lost: int | None
    restart_count: int | None = None
    evidence: str | None = None
    hosts: tuple[str, ...] = ()  # the host that failed first, then the peers that saw it
    # Causes of restarts that failed before their first step, within this one outage.
    failed_restarts: tuple[str, ...] = ()
    # Not recovered but over: "pause", "stop", "launch", "resume", "relaunch" (the
    # operator's) or "peer" (another host's part ended); `ended_text` says it.
    ended_by: str | None = None
    # s from the failure to its detection: a crash is seen within a look, a hang only
    # once its silence outlasts the limit, so `detected_at` can be long after the failure.
    detection_latency: float | None = None


@dataclass(frozen=True)
class Health:
    hosts: tuple[HostHealth, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    simulated: bool = False  # any GPU in the view is simulated: show SIM
    checkpoint_advice: str | None = None  # Young/Daly interval from measured cost and MTBF
    # The job-wide restart budget, used and left, as the newest restart decision left it
    # (`cockpit.analysis.restart_budget`); None before any.
    restart_budget: str | None = None


@dataclass(frozen=True)
class Alert:
    ts: float
    kind: str  # resource, data, parameter
    severity: str  # info, warning, critical
    code: str
    where: str  # "host a / gpu 3 / rank 5 / step 1200"
    what: str
    hint: str
    # "active" (the condition holds), "resolved" (it happened and is over: a recovered
    # interruption stays listed), "acknowledged" (the operator has seen it: `x` in Alerts).
    state: str = "active"
    last_seen: float | None = None  # newest time the condition was seen (None: `ts`)


@dataclass(frozen=True)
class EventRow:
    ts: float
    host: str
    kind: str
    msg: str
    step: int | None = None
    count: int = 1  # the same event from several ranks at once, shown once


@dataclass(frozen=True)
class Snapshot:
    """Everything the main screen shows, at `ts` (the newest record's time, or the
    replay cursor)."""

    ts: float
    source_label: str  # "LIVE", "REPLAY 10x", ...
    job: str | None
    jobs_training: tuple[str, ...] = ()  # every job training now, oldest start first
    jobs: tuple[str, ...] = ()  # every job of the recording, in order of first appearance
    progress: Progress = field(default_factory=Progress)
    effect: Effect = field(default_factory=Effect)
    efficiency: Efficiency = field(default_factory=Efficiency)
    health: Health = field(default_factory=Health)
    alerts: tuple[Alert, ...] = ()
    events: tuple[EventRow, ...] = ()
    controllable: bool = False  # a control channel to the job is attached
