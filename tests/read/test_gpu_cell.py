"""`gpu_cell` fills a `GpuCell` without its `__init__` (the Health build's hot loop):
what it makes must be the dataclass's own value in every respect."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cockpit.read.health import build_health, gpu_cell
from cockpit.snapshot import GpuCell

FIELDS: dict[str, Any] = dict(
    index=3, online=True, simulated=False, util=97.0, temp=81.0, power=650.0,
    power_limit=700.0, mem_used=60 << 30, mem_total=80 << 30, ecc_unc=2, xid=79,
    throttle=0x20, name="H100", xid_count=4, xid_earlier=1, xid_codes=(48, 79),
    xid_earlier_last=12.5, ecc_lifetime=7)


def test_a_filled_cell_is_the_dataclass_value() -> None:
    made, built = gpu_cell(**FIELDS), GpuCell(**FIELDS)
    assert made == built and built == made
    assert hash(made) == hash(built)
    assert repr(made) == repr(built)
    assert dataclasses.asdict(made) == dataclasses.asdict(built)
    assert dataclasses.replace(made, util=1.0) == GpuCell(**{**FIELDS, "util": 1.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.util = 5.0  # type: ignore[misc]  # the point: it stays frozen


def test_every_field_must_be_given() -> None:
    fewer = {k: v for k, v in FIELDS.items() if k != "ecc_lifetime"}
    with pytest.raises(TypeError, match="ecc_lifetime"):
        gpu_cell(**fewer)
    with pytest.raises(TypeError, match="colour"):
        gpu_cell(**FIELDS, colour="red")


def test_health_cells_equal_cells_built_by_the_dataclass() -> None:
    host = {"host": "h1", "state": "streaming", "gpu_source": "nvml",
            "gpus": [{"index": 0, "name": "H100", "mem_total": 80 << 30},
                     {"index": 1, "name": "H100", "mem_total": 80 << 30}]}
    gpus = [{"host": "h1", "gpu": 0, "ts": 10.0, "seq": 5, "sim": False, "util": 99.0,
             "temp": 70.0, "power": 600.0, "power_limit": 700.0, "mem_used": 1 << 30,
             "mem_total": None, "ecc_vol_unc": 0, "throttle": 0, "ecc_agg_unc": 3}]
    history = [{"host": "h1", "gpu": 1, "count": 2, "earlier": 1, "newest": 79,
                "codes": [48, 79], "earlier_last_ts": 4.0}]
    health = build_health([host], gpus, [], [], [], None, 11.0, replaying=False,
                          xid_history=history)
    cells = health.hosts[0].gpus
    assert [dataclasses.replace(c) for c in cells] == list(cells)
    online, offline = cells
    assert (online.online, online.util, online.mem_total, online.ecc_lifetime) == (
        True, 99.0, 80 << 30, 3)
    assert (offline.online, offline.xid, offline.xid_codes, offline.xid_earlier_last) == (
        False, 79, (48, 79), 4.0)
