"""Realistic wire records for benchmarks and size estimates.

Field values vary the way real samples do (random utilisation, temperatures, losses), so
DuckDB's compression sees data like a real recording's, not constant columns that would
make sizes and speeds look better than they are.
"""

from __future__ import annotations

import random

from agent.protocol import encode


def synthetic_lines(rows: int, ranks: int = 8, seed: int = 7) -> bytes:
    """A stream header, then `rows` records: per second 8 gpu, `ranks` train, 1 host."""
    rnd = random.Random(seed)
    out: list[bytes] = []
    seq = 0
    ts = 1.7e9
    step = 0
    header = {"protocol": 1, "agent_version": "estimate", "journal_id": "estimate",
              "from": 0, "first": 1, "head": rows}
    out.append(encode("stream", 0, header, ts=ts))
    while seq < rows:
        ts += 1.0
        for g in range(8):
            seq += 1
            out.append(encode("gpu", seq, {
                "gpu": g, "uuid": f"GPU-{g:08x}", "sim": False, "util": rnd.uniform(0, 100),
                "mem_util": rnd.uniform(0, 100), "mem_used": rnd.randrange(1 << 34),
                "mem_total": 85899345920, "temp": rnd.uniform(30, 80),
                "power": rnd.uniform(100, 700), "power_limit": 700.0, "sm_clock": 1980,
                "mem_clock": 2619, "fan": None, "throttle": 0, "ecc_vol_corr": 0,
                "ecc_vol_unc": 0, "ecc_agg_corr": 0, "ecc_agg_unc": 0, "retired_pages": 0,
                "remap_pending": False, "pcie_tx": rnd.uniform(0, 1e6),
                "pcie_rx": rnd.uniform(0, 1e6), "pcie_replay": 0, "nvlink_err": 0,
                "procs": [{"pid": 1000 + g, "mem": rnd.randrange(1 << 33), "rank": g}],
            }, ts=ts))
        for rank in range(ranks):
            seq += 1
            out.append(encode("train", seq, {
                "job": "estimate", "rank": rank, "step": step, "epoch": step / 1000,
                "stage": "train", "loss": rnd.uniform(1, 3), "nonfinite": None, "lr": 3e-4,
                "samples": 32, "tokens": 65536, "step_time": rnd.uniform(0.3, 0.4),
                "data_time": 0.01, "compute_time": 0.3, "comm_time": 0.05, "ckpt_time": None,
                "loss_scale": 65536.0, "grad_norm": rnd.uniform(0, 2), "extra": {},
            }, ts=ts))
        step += 1
        seq += 1
        out.append(encode("host", seq, {
            "cpu": rnd.uniform(0, 100), "load1": 1.0, "load5": 1.0, "load15": 1.0,
            "mem_used": rnd.randrange(1 << 36), "mem_total": 1 << 40, "swap_used": 0,
            "swap_total": 0, "disk_path": "/", "disk_used": 1 << 40, "disk_total": 1 << 42,
            "disk_read": 1e6, "disk_write": 1e6, "net_rx": 1e8, "net_tx": 1e8,
            "procs": [{"pid": 1, "rank": 0, "cpu": 99.0, "rss": 1 << 33, "state": "R",
                       "fds": 100}],
        }, ts=ts))
    return b"".join(out)
