"""The one verdict on a GPU and a host: each state from the figures that make it, the
worst of several winning, the link's word counted, and the host resources' levels."""

from __future__ import annotations

import dataclasses

import pytest

from cockpit.analysis import gpu_state as gs
from cockpit.analysis.alert_config import AlertThresholds
from cockpit.analysis.gpu_state import GpuState, Level
from cockpit.analysis.throttle import APP_CLOCKS, HW_SLOWDOWN, IDLE, SW_THERMAL
from cockpit.snapshot import GpuCell, HostHealth

WELL = GpuCell(index=0, online=True, simulated=False, util=95.0, temp=60.0, ecc_unc=0,
               throttle=0)


def cell(**changes: object) -> GpuCell:
    return WELL._replace(**changes)


def host(*cells: GpuCell, state: str = "streaming", **changes: object) -> HostHealth:
    return HostHealth(host="node-a", state=state, gpu_state="ok", gpus=cells, **changes)


@pytest.mark.parametrize(("changes", "state"), [
    ({}, GpuState.OK),
    ({"online": False}, GpuState.OFFLINE),
    ({"xid": 79}, GpuState.XID),
    ({"ecc_unc": 2}, GpuState.ECC),
    ({"throttle": SW_THERMAL}, GpuState.THROTTLED),
    ({"temp": gs.HOT_CELSIUS}, GpuState.HOT),
    ({"temp": gs.HOT_CELSIUS - 0.1}, GpuState.OK),
    ({"util": gs.IDLE_UTIL_PCT - 1}, GpuState.IDLE),
    ({"util": None, "temp": None, "ecc_unc": None, "throttle": None}, GpuState.OK),
])
def test_each_state_comes_from_its_own_figure(changes: dict, state: GpuState) -> None:
    assert gs.gpu_state(cell(**changes)) is state


def test_benign_throttle_reasons_are_no_problem() -> None:
    """An idle GPU or clocks an administrator set are reported by NVML as reasons too."""
    assert gs.gpu_state(cell(throttle=IDLE | APP_CLOCKS)) is GpuState.OK
    assert gs.gpu_state(cell(throttle=IDLE | HW_SLOWDOWN)) is GpuState.THROTTLED


def test_the_worst_figure_decides() -> None:
    everything = cell(xid=13, ecc_unc=1, throttle=SW_THERMAL, temp=95.0, util=0.0)
    assert gs.gpu_state(everything) is GpuState.XID
    assert gs.gpu_state(everything._replace(online=False)) is GpuState.OFFLINE
    assert gs.gpu_state(cell(throttle=SW_THERMAL, temp=95.0)) is GpuState.THROTTLED
    assert gs.worst([GpuState.IDLE, GpuState.HOT, GpuState.OK]) is GpuState.HOT
    assert gs.worst([]) is GpuState.OK
    ranks = [s.rank for s in GpuState]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)


def test_every_state_has_a_glyph_of_its_own() -> None:
    """Colour is never the only signal: no two states share a glyph."""
    glyphs = [s.glyph for s in GpuState]
    assert len(set(glyphs)) == len(glyphs)
    assert all(len(g) == 1 for g in glyphs)


def test_a_lost_link_makes_every_gpu_offline_whatever_it_last_said() -> None:
    lost = host(cell(), cell(index=1, xid=79), state="unreachable")
    assert gs.gpu_states(lost) == (GpuState.OFFLINE, GpuState.OFFLINE)
    assert gs.host_state(lost) is GpuState.OFFLINE
    assert gs.host_problem(lost) == "error"
    assert gs.host_cause(lost) == "unreachable"


def test_a_gpu_is_online_where_the_map_does_not_show_it_offline() -> None:
    """Its own sample missing, or its host's link lost: offline, in every count of
    GPUs online (the narrow Health line, a host's line, the report, the exporter)."""
    assert gs.gpus_online(host(cell(), cell(index=1, online=False))) == (True, False)
    assert gs.gpus_online(host(cell(), cell(index=1), state="unreachable")) == (False, False)
    # Reconnecting: stale figures, but a GPU that answered; the cockpit's own end: no fault.
    assert gs.gpus_online(host(cell(), state="connecting")) == (True,)
    assert gs.gpus_online(host(cell(), state="stopped")) == (True,)
    assert gs.gpus_online(host()) == ()


def test_a_reconnecting_link_makes_data_stale_unless_it_was_worse() -> None:
    stale = host(cell(), cell(index=1, xid=79), state="stale")
    assert gs.gpu_states(stale) == (GpuState.STALE, GpuState.XID)
    assert gs.host_state(stale) is GpuState.XID
    assert gs.host_state(host(cell(), state="connecting")) is GpuState.STALE
    assert gs.host_cause(host(cell(), state="connecting")) == "connecting"
    assert gs.host_problem(host(state="stale")) == "warning"  # no GPU: the link says it


def test_a_link_the_cockpit_closed_is_no_fault() -> None:
    ended = host(cell(), state="stopped")
    assert gs.host_state(ended) is GpuState.OK
    assert gs.host_problem(ended) is None


def test_host_cause_names_the_worst_gpu_or_how_many() -> None:
    one = host(cell(), cell(index=3, xid=79), cell(index=4, temp=90.0))
    assert gs.host_cause(one) == "gpu 3 XID 79"
    assert gs.gpu_problem(one.gpus[1]) == "error"
    assert gs.gpu_problem(one.gpus[2]) == "warning"
    assert gs.gpu_problem(one.gpus[0]) is None
    hot = host(cell(temp=90.0), cell(index=1, temp=91.0))
    assert gs.host_cause(hot) == "2 GPUs hot: gpu 0 hot 90°C, …"
    assert gs.host_cause(host(cell())) == "ok"
    throttled = host(cell(throttle=SW_THERMAL | IDLE))
    assert gs.host_cause(throttled) == "gpu 0 throttled: thermal (SW)"


def test_idle_is_shown_but_is_no_problem() -> None:
    idle = host(cell(util=0.0))
    assert gs.host_state(idle) is GpuState.IDLE
    assert gs.host_problem(idle) is None


def test_hosts_sort_worst_first_then_by_how_many_then_name() -> None:
    hosts = [
        dataclasses.replace(host(cell()), host="a-well"),
        dataclasses.replace(host(cell(temp=90.0)), host="b-one-hot"),
        dataclasses.replace(host(cell(temp=90.0), cell(index=1, temp=90.0)), host="c-two-hot"),
        dataclasses.replace(host(cell(), state="unreachable"), host="d-lost"),
    ]
    order = [h.host for h in sorted(hosts, key=gs.sort_key)]
    assert order == ["d-lost", "c-two-hot", "b-one-hot", "a-well"]


DEFAULTS = AlertThresholds()


@pytest.mark.parametrize(("resource", "fraction", "level"), [
    ("cpu", None, Level.UNKNOWN), ("cpu", 0.5, Level.OK),
    ("cpu", gs.CPU_HIGH_FRACTION, Level.WARNING), ("cpu", gs.CPU_FULL_FRACTION, Level.ERROR),
    ("cpu", 1.0, Level.ERROR),
    ("mem", DEFAULTS.memory_warn, Level.WARNING), ("mem", DEFAULTS.memory_full, Level.ERROR),
    ("disk", DEFAULTS.disk_warn, Level.WARNING), ("disk", DEFAULTS.disk_critical, Level.ERROR),
])
def test_fill_levels(resource: str, fraction: float | None, level: Level) -> None:
    assert gs.fill_level(fraction, resource) is level


def test_host_usage_by_fullness_and_the_network_against_the_busiest() -> None:
    full_disk = host(cpu=50.0, mem_used=95, mem_total=100, disk_used=99, disk_total=100,
                     net_rx=1.0e9, net_tx=1.0e9)
    quiet = host(net_rx=5.0e8, net_tx=None)
    busiest = gs.busiest_net_rate([full_disk, quiet])
    assert busiest == 2.0e9
    usage = gs.host_usage(full_disk, busiest)
    assert usage["cpu"] == gs.Usage(0.5, Level.OK)
    assert usage["mem"] == gs.Usage(0.95, Level.WARNING)
    assert usage["disk"] == gs.Usage(0.99, Level.ERROR)
    assert usage["net"] == gs.Usage(1.0, Level.OK)
    quiet_usage = gs.host_usage(quiet, busiest)
    assert quiet_usage["net"].fraction == 0.25
    assert quiet_usage["cpu"] == gs.Usage(None, Level.UNKNOWN)
    assert gs.host_usage(host(), None)["net"] == gs.Usage(None, Level.UNKNOWN)
    assert gs.busiest_net_rate([host()]) is None
