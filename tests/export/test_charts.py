"""`cockpit report --charts DIR`: valid SVG and PNG files of the right size, drawn from
the recorded run, with hostile text drawn as text."""

from __future__ import annotations

import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.export.charts import DPI, SIZE_IN, write_charts
from cockpit.snapshot import GpuCell, Health, HostHealth, Snapshot

NAMES = ("loss", "lr", "throughput", "gpus")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
def test_report_writes_every_chart_as_svg_and_png(recorded_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "charts"
    done = subprocess.run([str(Path(sys.executable).parent / "cockpit"), "report",
                           str(recorded_store), "--charts", str(out)], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "charts: " in done.stderr
    for name in NAMES:
        ET.parse(out / f"{name}.svg")  # parses as XML
        width, height = _png_size(out / f"{name}.png")
        assert width == int(SIZE_IN[0] * DPI)
        assert height == int(SIZE_IN[1] * DPI * (1.5 if name == "gpus" else 1))
    svg = (out / "loss.svg").read_text()
    assert "validation loss" in svg and "restart" in svg


@pytest.mark.slow
def test_hostile_names_are_drawn_as_text(tmp_path: Path) -> None:
    host = "gpu$\\alpha$\x1b]0;x\x07"
    snap = Snapshot(ts=1.0, source_label="REPORT", job="j$x$", health=Health(hosts=(
        HostHealth(host=host, state="streaming", gpu_state="ok",
                   gpus=(GpuCell(index=0, online=True, simulated=False, util=50.0),)),)))
    written = write_charts(replace(snap), tmp_path)
    svg = (tmp_path / "gpus.svg").read_text()
    assert "\x1b" not in svg and "\x07" not in svg
    assert "gpu$\\alpha$" in svg  # not typeset as mathtext
    assert len(written) == 2 * len(NAMES)
