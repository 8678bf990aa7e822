"""Realistic wire records for benchmarks and size estimates.

Field values vary the way real samples do, so DuckDB's compression sees data like a real
recording's, not constant columns that would make sizes and speeds look better than they
are. Two kinds of GPU and host readings:

- `"uniform"` (the benchmarks'): every reading drawn afresh each second at full float
  precision. Longer lines and nothing for compression to find: the hard case for parsing
  and storing.
- `"nvml"` (the size estimate's): readings as NVML and psutil report them (integer
  percent and degrees, power in milliwatts, memory that changes when the job allocates,
  PCIe counters in KB/s) and as a training job produces them: each a random walk from the
  previous second. Sizes measured on uniform noise would overstate a recording several
  times over; losses and step times stay full-precision noise in both.
"""

from __future__ import annotations

import random

from agent.wire.protocol import GPU, HOST, PROTOCOL_VERSION, STREAM_HEADER, TRAIN, encode

# Fields that read the same however the readings are drawn.
_GPU_FIXED: dict[str, object] = {
    "sim": False, "mem_total": 85899345920, "power_limit": 700.0, "mem_clock": 2619,
    "fan": None, "throttle": 0, "ecc_vol_corr": 0, "ecc_vol_unc": 0, "ecc_agg_corr": 0,
    "ecc_agg_unc": 0, "retired_pages": 0, "remap_pending": False, "pcie_replay": 0,
    "nvlink_err": 0,
}
_HOST_FIXED: dict[str, object] = {
    "load5": 1.0, "load15": 1.0, "swap_used": 0, "swap_total": 0, "disk_path": "/",
    "disk_used": 1 << 40, "disk_total": 1 << 42,
    "procs": [{"pid": 1, "rank": 0, "cpu": 99.0, "rss": 1 << 33, "state": "R", "fds": 100}],
}


def synthetic_lines(rows: int, ranks: int = 8, seed: int = 7, readings: str = "uniform") -> bytes:
    """A stream header, then `rows` records: per second 8 gpu, `ranks` train, 1 host."""
    if readings not in ("uniform", "nvml"):
        raise ValueError(f"readings must be 'uniform' or 'nvml', not {readings!r}")
    rnd = random.Random(seed)
    draw: _Uniform = _Walks(rnd) if readings == "nvml" else _Uniform(rnd)
    out: list[bytes] = []
    seq = 0
    ts = 1.7e9
    step = 0
    header = {"protocol": PROTOCOL_VERSION, "agent_version": "estimate", "journal_id": "estimate",
              "from": 0, "first": 1, "head": rows}
    out.append(encode(STREAM_HEADER, 0, header, ts=ts))
    while seq < rows:
        ts += 1.0
        for g in range(8):
            seq += 1
            out.append(encode(GPU, seq, {"gpu": g, "uuid": f"GPU-{g:08x}", **draw.gpu(g),
                                           **_GPU_FIXED}, ts=ts))
        for rank in range(ranks):
            seq += 1
            out.append(encode(TRAIN, seq, {
                "job": "estimate", "rank": rank, "step": step, "epoch": step / 1000,
                "stage": "train", "loss": rnd.uniform(1, 3), "nonfinite": None, "lr": 3e-4,
                "samples": 32, "tokens": 65536, "step_time": rnd.uniform(0.3, 0.4),
                "data_time": 0.01, "compute_time": 0.3, "comm_time": 0.05, "ckpt_time": None,
                "loss_scale": 65536.0, "grad_norm": rnd.uniform(0, 2), "extra": {},
            }, ts=ts))
        step += 1
        seq += 1
        out.append(encode(HOST, seq, {**draw.host(), **_HOST_FIXED}, ts=ts))
    return b"".join(out)


def _step(rnd: random.Random, value: float, spread: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value + rnd.uniform(-spread, spread)))


class _Uniform:
    """Every reading drawn afresh each second over its whole range, at full precision."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def gpu(self, g: int) -> dict[str, object]:
        rnd = self.rnd
        return {
            "util": rnd.uniform(0, 100), "mem_util": rnd.uniform(0, 100),
            "mem_used": rnd.randrange(1 << 34), "temp": rnd.uniform(30, 80),
            "power": rnd.uniform(100, 700), "sm_clock": 1980,
            "pcie_tx": rnd.uniform(0, 1e6), "pcie_rx": rnd.uniform(0, 1e6),
            "procs": [{"pid": 1000 + g, "mem": rnd.randrange(1 << 33), "rank": g}],
        }

    def host(self) -> dict[str, object]:
        rnd = self.rnd
        return {
            "cpu": rnd.uniform(0, 100), "load1": 1.0, "mem_used": rnd.randrange(1 << 36),
            "mem_total": 1 << 40, "disk_read": 1e6, "disk_write": 1e6, "net_rx": 1e8,
            "net_tx": 1e8,
        }


class _Walks(_Uniform):
    """Per-GPU and host readings that drift from one second to the next, at the
    resolution the samplers report them (`agent/samplers/nvml.py`, `host.py`)."""

    def __init__(self, rnd: random.Random) -> None:
        super().__init__(rnd)
        self.util = [95.0] * 8
        self.temp = [65.0] * 8
        self.power = [550_000.0] * 8  # milliwatts
        self.mem = [rnd.randrange(60 << 30, 70 << 30) for _ in range(8)]
        self.cpu = 40.0
        self.host_mem = 200 << 30

    def gpu(self, g: int) -> dict[str, object]:
        rnd = self.rnd
        self.util[g] = _step(rnd, self.util[g], 4, 0, 100)
        self.temp[g] = _step(rnd, self.temp[g], 0.6, 30, 90)
        self.power[g] = _step(rnd, self.power[g], 25_000, 80_000, 700_000)
        if rnd.random() < 0.002:  # the allocator grows or releases a segment
            self.mem[g] += rnd.choice((-1, 1)) * (2 << 20) * rnd.randrange(1, 64)
        util = float(round(self.util[g]))
        return {
            "util": util, "mem_util": float(round(util * 0.45)), "mem_used": self.mem[g],
            "temp": float(round(self.temp[g])), "power": round(self.power[g]) / 1000.0,
            "sm_clock": 1980 if util > 20 else 1410,
            "pcie_tx": float(rnd.randrange(20_000, 40_000)),
            "pcie_rx": float(rnd.randrange(150_000, 300_000)),
            "procs": [{"pid": 1000 + g, "mem": self.mem[g] - (512 << 20), "rank": g}],
        }

    def host(self) -> dict[str, object]:
        rnd = self.rnd
        self.cpu = _step(rnd, self.cpu, 3, 0, 100)
        if rnd.random() < 0.05:
            self.host_mem += rnd.choice((-1, 1)) * rnd.randrange(1 << 20, 1 << 26)
        return {
            "cpu": round(self.cpu, 1), "load1": round(self.cpu / 100 * 96, 2),
            "mem_used": self.host_mem, "mem_total": 1 << 41,
            "disk_read": float(rnd.randrange(0, 50_000_000)),
            "disk_write": float(rnd.randrange(0, 5_000_000)),
            "net_rx": float(rnd.randrange(100_000_000, 1_000_000_000)),
            "net_tx": float(rnd.randrange(100_000_000, 1_000_000_000)),
        }
