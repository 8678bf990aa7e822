from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.samplers.host import HostSampler
from agent.samplers.sim import THROTTLE_THERMAL, SimGpus

GPU_FIELDS = {
    "gpu", "uuid", "sim", "util", "mem_util", "mem_used", "mem_total", "temp", "power",
    "power_limit", "sm_clock", "mem_clock", "fan", "throttle", "ecc_vol_corr", "ecc_vol_unc",
    "ecc_agg_corr", "ecc_agg_unc", "retired_pages", "remap_pending", "pcie_tx", "pcie_rx",
    "pcie_replay", "nvlink_err", "procs",
}
HOST_FIELDS = {
    "cpu", "load1", "load5", "load15", "mem_used", "mem_total", "swap_used", "swap_total",
    "disk_path", "disk_used", "disk_total", "disk_read", "disk_write", "net_rx", "net_tx",
    "procs",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sim_records_are_flagged_and_complete() -> None:
    sim = SimGpus(3, seed=7)
    assert sim.state == "simulated" and sim.init()
    assert all(g["simulated"] for g in sim.inventory())
    records = sim.sample()
    assert [r["gpu"] for r in records] == [0, 1, 2]
    for record in records:
        assert set(record) == GPU_FIELDS
        assert record["sim"] is True
        assert record["fan"] is None  # a field the (simulated) card cannot give


def test_sim_follows_the_job_and_has_thermal_inertia() -> None:
    clock = Clock()
    sim = SimGpus(2, seed=1, follow_job=True, clock=clock)
    ranks = {101: 0, 102: 1, 100: None}
    temps = []
    for _ in range(120):
        clock.now += 1.0
        busy, idle = sim.sample(ranks, activity={101: 100.0, 102: 1.0})
        temps.append(busy["temp"])
    assert busy["util"] > 80 and idle["util"] < 15
    assert busy["power"] > idle["power"] + 300
    assert busy["temp"] > idle["temp"] + 15
    # temperature moves gradually, not in jumps
    assert max(abs(a - b) for a, b in itertools.pairwise(temps)) < 5
    assert busy["procs"] == [{"pid": 101, "mem": busy["mem_used"], "rank": 0}]
    # the job stops: utilisation falls back to idle
    for _ in range(10):
        clock.now += 1.0
        after = sim.sample({}, {})[0]
    assert after["util"] < 15


def test_sim_throttles_when_hot() -> None:
    clock = Clock()
    sim = SimGpus(1, seed=3, follow_job=True, clock=clock)
    sim.cards[0].hot_until = 1e12  # a blocked inlet for the whole test
    for _ in range(300):
        clock.now += 1.0
        record = sim.sample({7: 0}, {7: 100.0})[0]
    assert record["throttle"] & THROTTLE_THERMAL
    assert record["sm_clock"] < SimGpus.max_sm_clock


def test_host_sampler_reports_rates_from_the_second_sample(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    clock = Clock()
    sampler = HostSampler(tmp_path, clock=clock)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env={**os.environ, "RANK": "5"})
    try:
        first = sampler.sample({child.pid: 5})
        clock.now += 1.0
        second = sampler.sample({child.pid: 5, 999_999_999: None})
    finally:
        child.kill()
        child.wait()
    assert first is not None and second is not None
    assert set(first) == HOST_FIELDS
    assert first["cpu"] is None and first["net_rx"] is None  # no rate from one sample
    assert second["cpu"] is not None and second["disk_read"] is not None
    assert second["mem_total"] > 0 and second["disk_total"] > 0
    assert os.path.realpath(tmp_path).startswith(second["disk_path"])
    proc = second["procs"][0]
    assert len(second["procs"]) == 1  # the pid that does not exist is left out
    assert (proc["pid"], proc["rank"]) == (child.pid, 5)
    assert proc["rss"] > 0 and proc["fds"] >= 3 and proc["cpu"] is not None


def test_host_sampler_without_psutil_says_so(tmp_path: Path) -> None:
    sampler = HostSampler(tmp_path, load=lambda: None)
    assert sampler.available is False
    # Still a record every interval (no stale link): load and disk, the rest None.
    record = sampler.sample({1: 0})
    assert record is not None and record["procs"] == [] and record["mem_total"] is None
    assert record["disk_total"] > 0 and record["cpu"] is None


def test_ranks_that_ended_leave_the_gpus_idle(tmp_path: Path) -> None:
    """A rank's spool header outlives the rank: once the process is gone the daemon
    stops counting it, so a finished job's simulated GPUs idle instead of staying busy."""
    from agent.daemon import Daemon, DaemonConfig
    from agent.hook import Reporter

    run_dir = tmp_path / "run"
    script = ("import sys; from agent.hook import Reporter; "
              "r = Reporter(run_dir=sys.argv[1], job='done', rank=0); "
              "r.step(1, loss=1.0); r.close()")
    subprocess.run([sys.executable, "-c", script, str(run_dir)], check=True,
                   cwd=Path(__file__).resolve().parents[2])
    live = Reporter(run_dir=str(run_dir), job="going", rank=1)
    live.step(1, loss=1.0)
    clock = itertools.count(0.0, 1.0)
    gpus = SimGpus(2, seed=3, follow_job=True, clock=lambda: next(clock))
    daemon = Daemon(DaemonConfig(tmp_path / "state", run_dirs=[run_dir]), gpus=gpus,
                    log=lambda msg: None)
    try:
        daemon.spools.poll()
        assert daemon.pid_ranks() == {os.getpid(): 1}
        for _ in range(30):
            cards = gpus.sample(daemon.pid_ranks(), {os.getpid(): 95.0})
        busy = {c["gpu"]: c["util"] for c in cards}
        assert busy[1] > 80  # the running rank's GPU
        assert busy[0] < 5  # the ended rank's GPU: idle, not busy
    finally:
        live.close()
        daemon._shutdown()  # releases the state lock and closes the journal
