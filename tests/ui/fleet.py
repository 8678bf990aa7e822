"""A simulated fleet of 128 hosts × 8 GPUs for the screen at scale, in the states an
operator must tell apart at a glance: all well, one host throttled, one GPU with an
XID, one host unreachable.

The hardware records are synthetic (closed-form figures, no randomness, so a screenshot
is the same on every run) and marked simulated, as the agent's simulated sampler marks
its own. They go through `cockpit.read.health.build_health`, the builder the store's
rows go through, so the map sees what a real session of that fleet would give it; the
training panes are the static demo's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cockpit.analysis.throttle import HW_THERMAL, SW_THERMAL
from cockpit.read.health import build_health
from cockpit.snapshot import Snapshot
from cockpit.ui.demo_static import T0, demo_snapshot

HOSTS = 128
GPUS = 8
GIB = 2**30
STATES = ("healthy", "throttled", "xid", "offline")
THROTTLED_HOST = 37  # every GPU of it thermally throttled
XID_HOST, XID_GPU, XID = 90, 5, 79  # "GPU has fallen off the bus"
OFFLINE_HOST = 12


def host_name(i: int) -> str:
    return f"sim-node-{i:03d}"


def _host_rows() -> list[dict[str, Any]]:
    return [{"host": host_name(h), "gpu_source": "sim", "gpu_state": "simulated",
             "state": "streaming", "last_seen": T0, "mem_total": 2048 * GIB,
             "gpus": [{"index": g, "name": "NVIDIA H100 80GB HBM3", "simulated": True,
                       "mem_total": 80 * GIB} for g in range(GPUS)]}
            for h in range(HOSTS)]


def _gpu_rows(state: str) -> list[dict[str, Any]]:
    rows = []
    for h in range(HOSTS):
        for g in range(GPUS):
            throttled = state == "throttled" and h == THROTTLED_HOST
            rows.append({
                "host": host_name(h), "gpu": g, "sim": True, "ts": T0,
                "util": 88.0 + (h * 7 + g * 3) % 11,
                "temp": 89.0 if throttled else 58.0 + (h * 5 + g) % 17,
                "power": 520.0 + (h * 13 + g * 7) % 140, "power_limit": 700.0,
                "mem_used": (61 + (h + g) % 9) * GIB, "mem_total": 80 * GIB,
                "ecc_vol_unc": 0, "throttle": SW_THERMAL | HW_THERMAL if throttled else 0,
            })
    return rows


def _samples() -> list[dict[str, Any]]:
    return [{"host": host_name(h), "ts": T0, "cpu": 35.0 + (h * 11) % 40,
             "mem_used": (900 + (h * 37) % 600) * GIB, "mem_total": 2048 * GIB,
             "disk_used": (2000 + (h * 53) % 3000) * GIB, "disk_total": 7000 * GIB,
             "net_rx": 2.0e9 + (h * 17) % 50 * 1e7, "net_tx": 1.9e9 + (h * 29) % 50 * 1e7}
            for h in range(HOSTS)]


def fleet_snapshot(state: str) -> Snapshot:
    """The demo's job on the fleet in `state` (one of `STATES`)."""
    if state not in STATES:
        raise ValueError(f"unknown fleet state {state!r}; one of {', '.join(STATES)}")
    xids = ([{"host": host_name(XID_HOST), "ts": T0 - 30, "kind": "xid",
              "data": {"xid": XID, "gpu": XID_GPU}}] if state == "xid" else [])
    links = {host_name(h): "streaming" for h in range(HOSTS)}
    if state == "offline":
        links[host_name(OFFLINE_HOST)] = "unreachable"
    health = build_health(_host_rows(), _gpu_rows(state), _samples(), xids, [], links,
                          now=T0, replaying=False)
    demo = demo_snapshot()
    return dataclasses.replace(demo, health=dataclasses.replace(
        health, interruptions=demo.health.interruptions))
