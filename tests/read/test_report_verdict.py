"""The report states each GPU and host as the screen does: both ask
`cockpit.analysis.gpu_state`, so a GPU the map shows hot is hot in the report too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cockpit.analysis import gpu_state as gs
from cockpit.read.report import render_report
from cockpit.snapshot import GpuCell, HostHealth

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
