"""`cockpit scaling`: measured speed-up and efficiency of one workload at several scales.

A user picks a scale on measurements, not on the hope of linear scaling: the same job
run on 1 process, on N processes of one host (and, read from a recording of it, on
several hosts) gives its throughput at each; the table says the speed-up over the
smallest run, the efficiency against linear (speed-up ÷ the ratio of processes) and the
share of step time spent communicating, which is what the missing efficiency went to.

It runs the example trainer (examples/charlm, as `cockpit demo` does: agent, torchrun,
recording) at each size, or reads recordings given on the command line -- any job's,
from `cockpit run`, `cockpit watch` over SSH hosts, or an earlier `cockpit scaling`.
Figures are each recording's own: its throughput (samples/s over its recent steps, as
the Efficiency pane reads it), world size and hosts, at its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from cockpit.errors import CockpitError
from cockpit.read.source import build_snapshot
from cockpit.store import Store, StoreError
from cockpit.store.queries import StoreReader


@dataclass(frozen=True)
class Measure:
    label: str  # the recording's path, or "1 process", "2 processes"
    world: int
    hosts: int
    samples_per_s: float | None
    comm_pct: float | None
    step_time: float | None


def measure(path: Path, label: str | None = None) -> Measure:
    """One recording's scale and throughput, read at its end."""
    try:
        with Store(path, read_only=True) as store:
            reader = StoreReader(store)
            snap = build_snapshot(reader, until_ts=None, label="REPORT")
            declared = reader.run_info(snap.job).get("world_size") if snap.job else None
    except StoreError as exc:
        raise CockpitError(f"{path}: {exc}") from None
    e = snap.efficiency
    if snap.job is None or e.samples_per_s is None:
        raise CockpitError(f"{path}: no training steps to measure")
    world = declared if isinstance(declared, int) and declared > 0 else max(
        len(e.slowest_ranks), 1)
    hosts = len({h.host for h in snap.health.hosts}) or 1
    return Measure(label or str(path), world, hosts, e.samples_per_s, e.comm_pct,
                   e.step_time_median)


@dataclass(frozen=True)
class Row:
    measure: Measure
    speedup: float | None
    ideal: float
    efficiency: float | None


def compare(measures: list[Measure]) -> list[Row]:
    """Each measure against the smallest world's (the baseline): speed-up, linear, and
    efficiency = speed-up ÷ linear."""
    if not measures:
        return []
    ordered = sorted(measures, key=lambda m: (m.world, m.hosts))
    base = ordered[0]
    out = []
    for m in ordered:
        ideal = m.world / base.world
        speedup = (m.samples_per_s / base.samples_per_s
                   if m.samples_per_s and base.samples_per_s else None)
        out.append(Row(m, speedup, ideal, None if speedup is None else speedup / ideal))
    return out


def render(rows: list[Row]) -> str:
    header = ("run", "processes", "hosts", "samples/s", "speed-up", "linear", "efficiency",
              "comm share")
    body = [(r.measure.label, str(r.measure.world), str(r.measure.hosts),
             _num(r.measure.samples_per_s, ".1f"), _num(r.speedup, ".2f", "×"),
             f"{r.ideal:.2f}×", _num(None if r.efficiency is None else 100 * r.efficiency,
                                     ".0f", "%"),
             _num(r.measure.comm_pct, ".1f", "%")) for r in rows]
    widths = [max(len(c) for c in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip()
             for row in (header, *body)]
    note = ("efficiency = speed-up ÷ linear (processes ÷ the smallest run's); the missing "
            "share went to communication, data wait or contention for this host's cores")
    return "\n".join([*lines, "", note]) + "\n"


def _num(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:{spec}}{unit}"


def run_sizes(root: Path, sizes: list[int], steps: int) -> list[Measure]:
    """The example trainer at each size (processes on this host), each through the real
    pipeline into a recording of its own under `root/N`; measured once it finished."""
    from cockpit.app.demo import DemoRun

    out = []
    for nproc in sizes:
        run = DemoRun(run_root=root / f"{nproc}proc", steps=steps, nproc=nproc,
                      simulate_gpus=0)
        with run:
            run.record_for(max(120.0, steps * 5.0))
            if not run.finished():
                raise CockpitError(f"the {nproc}-process run did not finish; its recording "
                                   f"is {run.store_path}")
        out.append(measure(run.store_path,
                           f"{nproc} process{'es' if nproc > 1 else ''} on this host"))
    return out
