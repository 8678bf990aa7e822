"""An `[alerts]` file's thresholds reach every verdict judged by them, not only the
alerts: the data-wait gauge's level, the map's memory and disk levels, and the causes a
stall is put down to (host memory or disk pressed, data loading starved)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cockpit.analysis import gpu_state as gs
from cockpit.analysis.alert_config import AlertConfigError, load_alert_config
from cockpit.analysis.efficiency import BAD, GOOD, WARN, gauge_level, with_gauge_levels
from cockpit.analysis.gpu_state import Level
from cockpit.analysis.ranks import RankSummary
from cockpit.analysis.stalls import CONTENTION, DATA_STARVED, HostPressure, likely_cause
from cockpit.snapshot import Efficiency, HostHealth
from tests.harness.thresholds import configure


def test_the_data_wait_gauge_is_bad_where_the_configured_alert_is_raised(
        configured: None) -> None:
    figures = Efficiency(gpu_busy=90.0, data_wait_pct=20.0, comm_pct=10.0, mfu=0.4)
    judged = with_gauge_levels(figures)
    assert (judged.gpu_busy_level, judged.data_wait_level, judged.comm_level,
            judged.mfu_level) == (GOOD, WARN, GOOD, GOOD)
    configure(data_wait_warn_pct=15.0)
    assert with_gauge_levels(figures).data_wait_level == BAD
    # Below the gauge's good level, the alert's threshold still wins: it is bad there.
    configure(data_wait_warn_pct=2.0)
    assert with_gauge_levels(dataclasses.replace(figures, data_wait_pct=3.0)
                             ).data_wait_level == BAD


def test_gauge_levels_work_both_ways_and_none_is_unknown() -> None:
    assert gauge_level(90, 80, 50, higher_is_better=True) == GOOD
    assert gauge_level(60, 80, 50, higher_is_better=True) == WARN
    assert gauge_level(40, 80, 50, higher_is_better=True) == BAD
    assert gauge_level(3, 5, 30, higher_is_better=False) == GOOD
    assert gauge_level(15, 5, 30, higher_is_better=False) == WARN
    assert gauge_level(45, 5, 30, higher_is_better=False) == BAD
    assert gauge_level(None, 5, 30, higher_is_better=False) is None
    assert with_gauge_levels(Efficiency()).mfu_level is None


def _host(mem: float, disk: float) -> HostHealth:
    return HostHealth(host="a", state="streaming", gpu_state="ok", cpu=10.0,
                      mem_used=int(mem * 1000), mem_total=1000,
                      disk_used=int(disk * 1000), disk_total=1000)


def test_the_maps_memory_and_disk_levels_follow_the_configured_thresholds(
        configured: None) -> None:
    host = _host(mem=0.85, disk=0.85)
    usage = gs.host_usage(host, None)
    assert (usage["mem"].level, usage["disk"].level) == (Level.OK, Level.OK)
    configure(memory_warn=0.80, disk_warn=0.80)
    usage = gs.host_usage(host, None)
    assert (usage["mem"].level, usage["disk"].level) == (Level.WARNING, Level.WARNING)
    assert gs.fill_level(0.85, "disk") is Level.WARNING
    configure(memory_warn=0.80, memory_full=0.84, disk_warn=0.80, disk_critical=0.84)
    usage = gs.host_usage(host, None)
    assert (usage["mem"].level, usage["disk"].level) == (Level.ERROR, Level.ERROR)
    assert usage["cpu"].level is Level.OK  # CPU has no alert threshold: its own


def _ranks(data_share: float) -> list[RankSummary]:
    return [RankSummary(rank=r, host="a", step_time=1.0, own_time=0.9, data_share=data_share,
                        comm_share=0.1, last_step=10, steps=10) for r in range(2)]


def test_the_stall_cause_follows_the_configured_thresholds(configured: None) -> None:
    pressed = [HostPressure(host="a", mem_frac=0.90, disk_frac=0.93, gpu_util=10.0)]
    assert likely_cause(_ranks(0.05), pressed, no_progress=False)[0] is None
    configure(memory_warn=0.88)
    cause, detail, where = likely_cause(_ranks(0.05), pressed, no_progress=False)
    assert (cause, where) == (CONTENTION, {"host": "a"})
    assert detail is not None and "memory 90%" in detail and "disk" not in detail
    configure(disk_warn=0.90, disk_critical=0.92)
    cause, detail, _ = likely_cause(_ranks(0.05), pressed, no_progress=False)
    assert cause == CONTENTION and detail is not None and "disk 93%" in detail
    # Data loading's share of the step: starved from the data-wait alert's threshold.
    configure()
    assert likely_cause(_ranks(0.2), [], no_progress=False)[0] is None
    configure(data_wait_warn_pct=15.0)
    assert likely_cause(_ranks(0.2), [], no_progress=False)[0] == DATA_STARVED


def test_memory_full_is_a_threshold_of_the_alerts_table(tmp_path: Path) -> None:
    path = tmp_path / "cockpit.toml"
    path.write_text("[alerts]\nmemory_warn = 0.8\nmemory_full = 0.9\n")
    assert (load_alert_config(path).memory_warn, load_alert_config(path).memory_full) == (
        0.8, 0.9)
    path.write_text("[alerts]\nmemory_warn = 0.9\nmemory_full = 0.85\n")
    with pytest.raises(AlertConfigError,
                       match=r":3: alerts\.memory_full must not be below alerts\.memory_warn"):
        load_alert_config(path)
    # A table that sets only a memory_warn above memory_full's default is not refused:
    # memory is full from the warning on.
    path.write_text("[alerts]\nmemory_warn = 0.99\n")
    assert load_alert_config(path).memory_full == 0.99
