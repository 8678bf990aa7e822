"""The report states each GPU and host as the screen does: both ask
`cockpit.analysis.gpu_state`, so a GPU the map shows hot is hot in the report too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cockpit.analysis import gpu_state as gs
from cockpit.read.report import _health, render_report
from cockpit.snapshot import GpuCell, Health, HostHealth, Snapshot

GPU_FIELDS = set(GpuCell._fields)
HOST_FIELDS = {f.name for f in dataclasses.fields(HostHealth)} - {"gpus"}


def test_the_reports_verdicts_are_the_screens(recording: Path) -> None:
    data = json.loads(render_report(recording, fmt="json"))
    hosts = data["health"]["hosts"]
    assert hosts and all(h["gpus"] for h in hosts)
    for row in hosts:
        cells = tuple(GpuCell(**{k: g[k] for k in GPU_FIELDS}) for g in row["gpus"])
        host = HostHealth(**{k: row[k] for k in HOST_FIELDS}, gpus=cells)
        states = gs.gpu_states(host)
        assert [g["verdict"] for g in row["gpus"]] == [s.label for s in states]
        assert row["verdict"] == gs.host_state(host).label
        assert row["cause"] == gs.host_cause(host)
    text = render_report(recording, fmt="text")
    first = hosts[0]
    assert first["cause"] in text and first["gpus"][0]["verdict"] in text


def test_a_lost_hosts_gpus_are_not_online_in_the_report() -> None:
    """Online as the map shows it: an unreachable host's GPUs are offline, per GPU and
    in the host's count, though each cell still holds its last sample."""
    well = GpuCell(index=0, online=True, simulated=False, util=90.0, temp=60.0)
    hosts = (HostHealth(host="up", state="streaming", gpu_state="ok",
                        gpus=(well, well._replace(index=1, online=False))),
             HostHealth(host="lost", state="unreachable", gpu_state="ok",
                        gpus=(well, well._replace(index=1))))
    rows = _health(Snapshot(ts=0.0, source_label="REPLAY", job=None,
                            health=Health(hosts=hosts)))["hosts"]
    assert [(r["gpus_online"], [g["online"] for g in r["gpus"]]) for r in rows] == [
        (1, [True, False]), (0, [False, False])]
    assert [g["verdict"] for g in rows[1]["gpus"]] == ["offline", "offline"]
