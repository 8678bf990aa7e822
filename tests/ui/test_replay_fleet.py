"""A recording of a 1,024-GPU fleet replays: its first screen, at the start and at the end.

A replay caps DuckDB's buffer pool (`cockpit.sessions.replay.MEMORY_LIMIT`), and a read
whose need grows with the fleet's width (every column of a 1,024-GPU `gpu` table pinned
by every scanning thread) fails there with DuckDB's out-of-memory error. The recording
here is written the way `cockpit watch` writes one: each of 128 hosts' agent stream as
wire lines (a `stream` header, `hello` with 8 GPUs, then every second a `host` sample
and one `gpu` sample per GPU; a 128-rank job on 16 of the hosts with a `train` record
per rank per step; an XID on one GPU) stored by `Store.ingest_many`, the writer's own
call, a few seconds per flush, and closed as the cockpit closes it. Then the app shows
it through `ReplaySource`, with the replay's own pool, as `cockpit replay` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.sessions.replay import ReplaySource
from cockpit.store.database import Store
from cockpit.ui.app_factory import make_app
from tests.ui.helpers import notifications, settle

HOSTS, GPUS, SECONDS = 128, 8, 40
JOB_HOSTS = 16
RANKS = JOB_HOSTS * GPUS
STEP_S = 0.5
FLUSH_S = 10
T0 = 1_800_000_000.0
JOB = "fleet-job"
XID_HOST, XID_GPU, XID_AT = 77, 3, 25


def _name(h: int) -> str:
    return f"node-{h:03d}"


def _record(path: Path) -> None:
    seqs = [0] * HOSTS
    lines: list[list[bytes]] = [[] for _ in range(HOSTS)]

    def add(h: int, t: str, ts: float, fields: dict) -> None:
        seqs[h] += 1
        lines[h].append(encode(t, seqs[h], fields, ts=ts))

    for h in range(HOSTS):
        lines[h].append(encode("stream", 0, {
            "protocol": 1, "agent_version": "test", "journal_id": f"j-{h}", "from": 0,
            "first": 1, "head": 0}, ts=T0))  # fmt: skip
        add(h, "hello", T0, {
            "agent_version": "test", "protocol": 1, "hostname": _name(h),
            "boot_id": f"b{h}", "pid": 100, "python": "3.11", "platform": "Linux",
            "cpu_count": 96, "mem_total": 2 << 40, "gpu_source": "sim",
            "gpu_state": "simulated", "driver": None, "psutil": True, "interval": 1.0,
            "gpus": [{"index": g, "uuid": f"GPU-{h}-{g}", "name": "Simulated H100",
                      "mem_total": 80 << 30, "simulated": True} for g in range(GPUS)]})
    add(0, "run", T0 + 0.5, {"job": JOB, "rank": 0, "world_size": RANKS,
                             "total_steps": 1000, "stages": ["train"], "config": {}})
    with Store(path) as store:
        for second in range(SECONDS):
            ts = T0 + 1 + second
            for h in range(HOSTS):
                add(h, "host", ts, {"cpu": 40.0, "load1": 9.0, "load5": 9.0, "load15": 9.0,
                                    "mem_used": 900 << 30, "mem_total": 2 << 40,
                                    "disk_path": "/", "disk_used": 1 << 40,
                                    "disk_total": 4 << 40, "net_rx": 1e9, "net_tx": 1e9,
                                    "procs": []})  # fmt: skip
                for g in range(GPUS):
                    add(h, "gpu", ts + g * 1e-3, {
                        "gpu": g, "uuid": f"GPU-{h}-{g}", "sim": True,
                        "util": 90.0 + (h + g + second) % 9, "mem_util": 40.0,
                        "mem_used": 60 << 30, "mem_total": 80 << 30,
                        "temp": 60.0 + (h + g) % 15, "power": 600.0, "power_limit": 700.0,
                        "sm_clock": 1980, "mem_clock": 2619, "fan": None, "throttle": 0,
                        "ecc_vol_corr": 0, "ecc_vol_unc": 0, "ecc_agg_corr": 0,
                        "ecc_agg_unc": 0, "retired_pages": 0, "remap_pending": False,
                        "pcie_tx": 1e9, "pcie_rx": 2e9, "pcie_replay": 0, "nvlink_err": 0,
                        "procs": []})
            for half in range(int(1 / STEP_S)):
                step = int(second / STEP_S) + half + 1
                for rank in range(RANKS):
                    add(rank // GPUS, "train", ts + half * STEP_S + rank * 1e-4, {
                        "job": JOB, "rank": rank, "step": step, "stage": "train",
                        "loss": 2.0 / (1 + step / 50), "samples": 16, "tokens": 32768,
                        "step_time": STEP_S, "data_time": 0.01, "compute_time": 0.4,
                        "comm_time": 0.05})
            if second == XID_AT:
                add(XID_HOST, "event", ts + 0.2, {
                    "kind": "xid", "job": None, "rank": None, "step": None,
                    "msg": f"XID 79 on GPU {XID_GPU}", "data": {"gpu": XID_GPU, "xid": 79}})
            if (second + 1) % FLUSH_S == 0:
                chunks = [(_name(h), b"".join(lines[h])) for h in range(HOSTS)]
                lines = [[] for _ in range(HOSTS)]
                result = store.ingest_many(chunks)
                assert not result.malformed and not result.failed, result


@pytest.fixture(scope="module")
def fleet_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.duckdb"
    _record(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("where", ["start", "end"])
async def test_a_1024_gpu_recording_replays_its_first_screen(fleet_recording: Path,
                                                             where: str) -> None:
    source = ReplaySource(fleet_recording)
    if where == "end":
        source.seek_to(1.0)
    source.pause()
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert app.main_screen.failing == ""
        assert not [n for n in notifications(app) if "failed" in n.lower()
                    or "memory" in n.lower()]
        snapshot = app.snapshot
        assert snapshot is not None
        hosts = snapshot.health.hosts
        assert len(hosts) == HOSTS
        assert sum(len(h.gpus) for h in hosts) == HOSTS * GPUS
        if where == "end":
            assert snapshot.progress.step == int(SECONDS / STEP_S)
            assert any(_name(XID_HOST) in line for line in app.export_screenshot().split())
