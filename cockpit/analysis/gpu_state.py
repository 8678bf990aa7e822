"""Which state a GPU and a host are in: the one verdict the screen and the report share.

A GPU is in the worst of the states its figures and its host's link put it in: offline,
a fatal XID, uncorrectable ECC errors, throttled for a reason that is not benign, hot,
data too old to trust (the link is reconnecting), idle, or ok. The map on the Health
pane, the host screen, the relaunch prompt's failing hosts and the headless report all
ask here, so a threshold is changed in one place and the screen never contradicts the
report. Host CPU, memory and disk get a level by how full they are; the network has no
known limit, so its figure is only compared with the busiest host's.

Pure functions on `cockpit.snapshot` values: no I/O, no UI.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter

from cockpit.analysis.alert_config import AlertThresholds
from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.throttle import BENIGN, throttle_text
from cockpit.snapshot import GpuCell, HostHealth
from cockpit.transport.states import CONNECTING, DEPLOYING, STALE, STOPPED, STREAMING

HOT_CELSIUS = 85.0  # sustained above this, datacenter GPUs start to slow themselves
IDLE_UTIL_PCT = 5.0  # below this SM utilisation a GPU is doing no work
# CPU this busy (share of all cores): high (a warning), full (an error). Memory and disk
# are graded by the alert thresholds (`alert_config`, an `[alerts]` file's if set).
CPU_HIGH_FRACTION = 0.90
CPU_FULL_FRACTION = 0.97

# Transport states (`cockpit.read.details.link_state`) by what they say of the data.
LINK_OK = frozenset({STREAMING})
LINK_WAIT = frozenset({CONNECTING, STALE, DEPLOYING})
# A link the cockpit closed itself (the end of a recording): no fault, nothing streams.
LINK_ENDED = frozenset({STOPPED})
_LINK_KNOWN = LINK_OK | LINK_WAIT | LINK_ENDED


class Level(Enum):
    """How urgent a state is; the screen colours by it (theme variables of that name)."""

    ERROR = "error"
    WARNING = "warning"
    NOTICE = "notice"  # worth seeing, nothing to act on by itself
    OK = "ok"
    UNKNOWN = "unknown"  # the host did not say


class GpuState(Enum):
    """A GPU's state, worst first: `worst()` picks by this order. Each has a glyph of
    its own shape so a state reads without its colour."""

    # label, glyph, level, rank (0 the worst: sort keys and `worst()` use it)
    OFFLINE = ("offline", "○", Level.ERROR, 0)
    XID = ("XID", "✖", Level.ERROR, 1)
    ECC = ("ECC", "◆", Level.ERROR, 2)
    THROTTLED = ("throttled", "▼", Level.WARNING, 3)
    HOT = ("hot", "▲", Level.WARNING, 4)
    STALE = ("stale", "?", Level.WARNING, 5)
    IDLE = ("idle", "·", Level.NOTICE, 6)
    OK = ("ok", "●", Level.OK, 7)

    def __init__(self, label: str, glyph: str, level: Level, rank: int) -> None:
        self.label = label
        self.glyph = glyph
        self.level = level
        self.rank = rank


_RANK = attrgetter("rank")


def worst(states: Iterable[GpuState], default: GpuState = GpuState.OK) -> GpuState:
    return min(states, key=_RANK, default=default)


def link_down(state: str) -> bool:
    """A link that is neither up, coming up nor closed by the cockpit: the host is lost."""
    return state not in _LINK_KNOWN


def gpu_state(cell: GpuCell) -> GpuState:
    """The state of one GPU by its own figures (its host's link aside)."""
    if not cell.online:
        return GpuState.OFFLINE
    if cell.xid:
        return GpuState.XID
    if (cell.ecc_unc or 0) > 0:
        return GpuState.ECC
    if (cell.throttle or 0) & ~BENIGN:
        return GpuState.THROTTLED
    if cell.temp is not None and cell.temp >= HOT_CELSIUS:
        return GpuState.HOT
    if cell.util is not None and cell.util < IDLE_UTIL_PCT:
        return GpuState.IDLE
    return GpuState.OK


def gpu_states(host: HostHealth) -> tuple[GpuState, ...]:
    """Each GPU of `host` in the worst of its own state and what the link says: a lost
    host's GPUs are offline whatever their last figures were, and a reconnecting host's
    are stale unless their last figures were worse."""
    if link_down(host.state):
        return tuple(GpuState.OFFLINE for _ in host.gpus)
    own = tuple(map(gpu_state, host.gpus))
    if host.state not in LINK_WAIT:
        return own
    stale = GpuState.STALE
    return tuple(s if s.rank < stale.rank else stale for s in own)


def gpus_online(host: HostHealth, states: tuple[GpuState, ...] | None = None
                ) -> tuple[bool, ...]:  # fmt: skip
    """Each GPU of `host`: is it online? Not where its newest sample is missing, nor
    where its host's link is lost: its last figures are then no news of it. What the
    map shows offline, every count of GPUs online says too. `states`: its GPUs' from
    `gpu_states`, when the caller has them already."""
    states = gpu_states(host) if states is None else states
    return tuple(s is not GpuState.OFFLINE for s in states)


def host_state(host: HostHealth, states: tuple[GpuState, ...] | None = None) -> GpuState:
    """The host's worst GPU, or its link's state where it has no GPU to show it.
    `states`: its GPUs' from `gpu_states`, when the caller has them already."""
    if link_down(host.state):
        return GpuState.OFFLINE
    link = GpuState.STALE if host.state in LINK_WAIT else GpuState.OK
    return worst(gpu_states(host) if states is None else states, default=link)


def gpu_problem(cell: GpuCell) -> str | None:
    """"error", "warning" or None for one GPU: what the operator must act on."""
    level = gpu_state(cell).level
    return level.value if level in (Level.ERROR, Level.WARNING) else None


def host_problem(host: HostHealth) -> str | None:
    """"error", "warning" or None for a host, its link included."""
    level = host_state(host).level
    return level.value if level in (Level.ERROR, Level.WARNING) else None


def gpu_cause(cell: GpuCell, state: GpuState) -> str:
    """What put a GPU in `state`, in words: "XID 79", "throttled: thermal (SW)"."""
    if state is GpuState.XID:
        return f"XID {cell.xid}"
    if state is GpuState.ECC:
        return f"ECC {cell.ecc_unc} uncorrectable"
    if state is GpuState.THROTTLED:
        return f"throttled: {throttle_text((cell.throttle or 0) & ~BENIGN)}"
    if state is GpuState.HOT:
        return f"hot {cell.temp:.0f}°C"
    if state is GpuState.IDLE:
        return f"idle ({cell.util:.0f}%)"
    return state.label


def host_cause(host: HostHealth, states: tuple[GpuState, ...] | None = None,
               state: GpuState | None = None) -> str:
    """Why a host is in its state, naming its worst GPU: "gpu 3 XID 79", "unreachable",
    "8 GPUs hot: gpu 0 hot 91°C, …"; "ok" for a well host. `states` and `state`: its
    GPUs' and its own, when the caller has them already."""
    states = gpu_states(host) if states is None else states
    state = host_state(host, states) if state is None else state
    if link_down(host.state):
        return host.state
    if state is GpuState.STALE:
        return host.state  # the link, not the GPUs: their own figures are no worse
    if state is GpuState.OK:
        return state.label
    hit = [cell for cell, s in zip(host.gpus, states, strict=True) if s is state]
    if not hit:
        return state.label
    cell = hit[0]
    cause = gpu_cause(cell, gpu_state(cell))
    if len(hit) == 1:
        return f"gpu {cell.index} {cause}"
    return f"{len(hit)} GPUs {state.label}: gpu {cell.index} {cause}, …"


def sort_key(host: HostHealth, states: tuple[GpuState, ...] | None = None,
             state: GpuState | None = None) -> tuple[int, int, str]:
    """Worst hosts first; among equals, the one with more GPUs in that state, then by
    name. `states` and `state` as for `host_cause`."""
    states = gpu_states(host) if states is None else states
    state = host_state(host, states) if state is None else state
    return (state.rank, -states.count(state), host.host)


# Host resources -----------------------------------------------------------------------

RESOURCES = ("cpu", "mem", "disk", "net")


@dataclass(frozen=True)
class Usage:
    """How much of one resource a host uses: a fraction (0..1; the network's is of the
    busiest host's rate) and its level. `fraction` None: the host did not say."""

    fraction: float | None
    level: Level


def fill_limits(thresholds: AlertThresholds | None = None
                ) -> dict[str, tuple[float, float]]:  # fmt: skip
    """(high, full) fractions of each of `FILLED`: memory and disk by the alert
    thresholds (a disk this full is critical: a checkpoint or the next allocation
    fails), CPU by its own. `thresholds`: those in force where not given."""
    t = limits() if thresholds is None else thresholds
    return {"cpu": (CPU_HIGH_FRACTION, CPU_FULL_FRACTION),
            "mem": (t.memory_warn, t.memory_full),
            "disk": (t.disk_warn, t.disk_critical)}


def fill_level(fraction: float | None, resource: str,
               thresholds: AlertThresholds | None = None) -> Level:
    """How full `fraction` of `resource` (one of `FILLED`) is: OK, WARNING (high) or
    ERROR (full), by `fill_limits`; UNKNOWN where not known."""
    return _graded(fraction, fill_limits(thresholds)[resource])


def _graded(fraction: float | None, bounds: tuple[float, float]) -> Level:
    if fraction is None:
        return Level.UNKNOWN
    high, full = bounds
    if fraction >= full:
        return Level.ERROR
    if fraction >= high:
        return Level.WARNING
    return Level.OK


def _fraction(used: float | None, total: float | None) -> float | None:
    return used / total if used is not None and total else None


def net_rate(host: HostHealth) -> float | None:
    """Bytes per second in and out together, or None when neither is known."""
    known = [v for v in (host.net_rx, host.net_tx) if v is not None]
    return sum(known) if known else None


FILLED = ("cpu", "mem", "disk")  # `fill_fractions`' order


def fill_fractions(host: HostHealth) -> tuple[float | None, float | None, float | None]:
    """How full the host's CPU, memory and disk are (0..1, None where it did not say),
    in `FILLED`'s order: the figures `host_usage` grades, for a caller that grades
    only the fullest of a fleet."""
    return (host.cpu / 100 if host.cpu is not None else None,
            _fraction(host.mem_used, host.mem_total),
            _fraction(host.disk_used, host.disk_total))


def host_usage(host: HostHealth, busiest_net: float | None) -> dict[str, Usage]:
    """CPU, memory and disk by how full they are (`fill_level`); the network against
    `busiest_net` (the fleet's busiest host, from `busiest_net_rate`), always at level OK."""
    cpu, mem, disk = fill_fractions(host)
    graded = fill_limits()  # the thresholds read once for the host's three
    rate = net_rate(host)
    net = None if rate is None else (rate / busiest_net if busiest_net else 0.0)
    return {
        "cpu": Usage(cpu, _graded(cpu, graded["cpu"])),
        "mem": Usage(mem, _graded(mem, graded["mem"])),
        "disk": Usage(disk, _graded(disk, graded["disk"])),
        "net": Usage(net, Level.UNKNOWN if net is None else Level.OK),
    }


def busiest_net_rate(hosts: Iterable[HostHealth]) -> float | None:
    rates = [r for r in map(net_rate, hosts) if r is not None]
    return max(rates) if rates else None
