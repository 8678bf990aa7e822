"""`cockpit scaling`: the example trainer on 1 and 2 processes through the real pipeline
(agent, torchrun on CPU/gloo, recordings), and the table of speed-up, efficiency against
linear and communication share; and the arithmetic on hand-made measures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.app.scaling import Measure, compare, render

REPO = Path(__file__).resolve().parents[2]


def test_speedup_and_efficiency_against_the_smallest_run() -> None:
    rows = compare([Measure("two hosts", 4, 2, 300.0, 20.0, 0.5),
                    Measure("one", 1, 1, 100.0, None, 0.3),
                    Measure("two", 2, 1, 180.0, 10.0, 0.4)])
    assert [r.measure.label for r in rows] == ["one", "two", "two hosts"]
    assert [round(r.speedup or 0, 2) for r in rows] == [1.0, 1.8, 3.0]
    assert [r.ideal for r in rows] == [1.0, 2.0, 4.0]
    assert [round(r.efficiency or 0, 2) for r in rows] == [1.0, 0.9, 0.75]
    table = render(rows)
    assert re.search(r"two hosts\s+4\s+2\s+300\.0\s+3\.00×\s+4\.00×\s+75%\s+20\.0%", table)
    assert re.search(r"one\s+1\s+1\s+100\.0\s+1\.00×\s+1\.00×\s+100%\s+n/a", table)


@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_cockpit_scaling_runs_the_example_and_prints_the_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "scaling", "--nproc", "2", "--steps", "30",
         "--dir", str(tmp_path / "s")],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=380)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {m.group(1): m.groups() for m in re.finditer(
        r"^(\d) process(?:es)? on this host\s+(\d)\s+1\s+([\d.]+)\s+([\d.]+)×\s+([\d.]+)×\s+"
        r"(\d+)%\s+(\S+)", done.stdout, re.M)}
    assert set(rows) == {"1", "2"}, done.stdout
    assert rows["1"][3:6] == ("1.00", "1.00", "100")  # the baseline
    assert rows["2"][1] == "2" and rows["2"][4] == "2.00"
    speedup, efficiency = float(rows["2"][3]), int(rows["2"][5])
    # The table rounds the speed-up to 2 places and the efficiency from the unrounded
    # figure: they agree within one point.
    assert speedup > 0 and abs(efficiency - 100 * speedup / 2) <= 1
    assert rows["2"][6].endswith("%")  # gloo's all-reduce, measured
    # Each size left its recording, which `cockpit scaling RECORDING…` reads again.
    again = subprocess.run(
        [sys.executable, "-m", "cockpit", "scaling",
         *(str(tmp_path / "s" / f"{n}proc" / "recording.duckdb") for n in (1, 2))],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=120)
    assert again.returncode == 0 and f"{speedup:.2f}×" in again.stdout, again.stdout
