"""`cockpit compare A B [C…]` and the app's compare screen: jobs side by side.

Each side is a job of a recording (`REC` or `REC:JOB`, as `cockpit diff` names them):
a fork and its parent, yesterday's run and today's, an imported run and a live one.
Reading (`side_of`, through the store's read API) is split from the pure part
(`metric_rows`, `kpi_table`, `provenance_table`, `render_comparison`: a `Comparison`
in, rows out), so the screen and the headless report show the same rows. The
provenance differences are `cockpit diff`'s (`cockpit.read.diff_report`), of the first
side against each other one; the KPIs are `cockpit report --kpis`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cockpit.analysis.kpis import JobKpis
from cockpit.analysis.provenance import ROWS_PER_SECTION as DIFF_ROWS_PER_SECTION
from cockpit.analysis.provenance import Diff, Provenance, as_json, diff, value_text
from cockpit.analysis.text import duration, json_printable, printable
from cockpit.errors import CockpitError
from cockpit.read.diff_report import baseline_of, parse_side, provenance_of
from cockpit.read.kpis_report import KPI_REFRESH_S, job_kpis_of, kpi_rows
from cockpit.read.opened import reading
from cockpit.read.report_format import FORMATS, Rows, Table, render_sections
from cockpit.snapshot import Series
from cockpit.store.queries import StoreReader

COMPARE_VERSION = 1
CURVE_BUCKETS = 200  # points per curve: a chart is at most a few hundred cells wide
MAX_SIDES = 6  # the screen's colours; also what the app compares when it guesses
# A curve's x axis: the step, or the seconds since the job's first step.
STEP_AXIS = "step"
TIME_AXIS = "time"
AXES = (STEP_AXIS, TIME_AXIS)
NOT_RECORDED = "—"


@dataclass(frozen=True)
class Curve:
    """A job's losses on both axes: x = step, and x = seconds since its first step (two
    runs started a day apart overlay from their starts)."""

    train_by_step: Series
    train_by_time: Series
    val_by_step: tuple[tuple[float, float], ...]
    val_by_time: tuple[tuple[float, float], ...]

    def train(self, axis: str) -> Series:
        return self.train_by_time if axis == TIME_AXIS else self.train_by_step

    def val(self, axis: str) -> tuple[tuple[float, float], ...]:
        return self.val_by_time if axis == TIME_AXIS else self.val_by_step


@dataclass(frozen=True)
class Speed:
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    # "step time": over the summed step times of the steps trained (the pace while
    # training); "wall clock": first to last step record, when the trainer reported no
    # step times (an imported log without them); None: too little to tell.
    basis: str | None = None


@dataclass(frozen=True)
class Side:
    label: str  # how the comparison names the side: REC:JOB
    recording: str
    job: str
    curve: Curve
    last_step: int | None
    final_loss: tuple[int, float] | None  # (step, loss) of the newest finite train loss
    best_loss: tuple[int, float] | None
    final_val: tuple[int, float] | None
    best_val: tuple[int, float] | None
    speed: Speed
    kpis: JobKpis
    provenance: Provenance


@dataclass(frozen=True)
class Comparison:
    sides: tuple[Side, ...]
    diffs: tuple[Diff, ...]  # the first side against each other side, in order
    note: str | None = None  # why there is one side only, when there is


# --- reading --------------------------------------------------------------------------------


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _shifted(series: Series, origin: float) -> Series:
    return Series(tuple(x - origin for x in series.x), series.last, series.lo, series.hi)


def _speed(t: dict[str, Any]) -> Speed:
    steps = int(t["steps"])
    samples, tokens = _finite(t["samples"]), _finite(t["tokens"])
    step_time = _finite(t["step_time"])
    if steps and step_time and t["timed_records"] == t["new_records"]:
        seconds, basis, timed = step_time, "step time", float(steps)
    else:
        first, last = _finite(t["first_ts"]), _finite(t["last_ts"])
        if not steps or first is None or last is None or last <= first or t["records"] < 2:
            return Speed()
        # Wall clock from the first record: that record's own step is not in it, and
        # samples and tokens count at their mean per step.
        seconds, basis, timed = last - first, "wall clock", float(steps - 1)
    per_step = timed / steps / seconds
    return Speed(timed / seconds, None if samples is None else samples * per_step,
                 None if tokens is None else tokens * per_step, basis)


def _point(step: object, value: object) -> tuple[int, float] | None:
    v = _finite(value)
    return (int(step), v) if isinstance(step, int) and v is not None else None


def _step(value: object) -> int | None:
    return value if isinstance(value, int) else None


def side_of(reader: StoreReader, recording: str, job: str, *,
            until_ts: float | None = None) -> Side:
    """One job of one recording, as the comparison shows it."""
    label = f"{recording}:{job}"
    totals = reader.run_totals(job, until_ts=until_ts)
    where: dict[str, Any] = {"job": job}
    if totals["rank"] is not None:
        where["rank"] = totals["rank"]
    (by_step,) = reader.series_columns("train", ("loss",), where=where, x="step",
                                       buckets=CURVE_BUCKETS, until_ts=until_ts)
    (by_ts,) = reader.series_columns("train", ("loss",), where=where, x="ts",
                                     buckets=CURVE_BUCKETS, until_ts=until_ts)
    origin = _finite(totals["first_ts"])
    evals = sorted((step, float(ts), v) for step, (ts, _seq, loss)
                   in reader.eval_losses(job, until_ts=until_ts).items()
                   if (v := _finite(loss)) is not None)
    val_step = tuple((float(s), v) for s, _ts, v in evals)
    val_time = tuple(sorted((ts - origin, v) for _s, ts, v in evals)
                     ) if origin is not None else ()
    final_val = max(evals, key=lambda e: e[1]) if evals else None
    best_val = min(evals, key=lambda e: (e[2], e[0])) if evals else None
    return Side(
        label=label, recording=recording, job=job,
        curve=Curve(by_step, _shifted(by_ts, origin) if origin is not None else Series(),
                    val_step, val_time),
        last_step=_step(totals["last_step"]),
        final_loss=_point(totals["final_loss_step"], totals["final_loss"]),
        best_loss=_point(totals["best_loss_step"], totals["best_loss"]),
        final_val=(final_val[0], final_val[2]) if final_val else None,
        best_val=(best_val[0], best_val[2]) if best_val else None,
        speed=_speed(totals),
        kpis=job_kpis_of(reader, job, until_ts=until_ts, recording=recording),
        provenance=provenance_of(reader, job, label, until_ts),
    )


def comparison(sides: Sequence[Side], note: str | None = None) -> Comparison:
    """The sides, and the provenance diff of the first against each other one."""
    first = sides[0].provenance if sides else None
    diffs = tuple(diff(first, s.provenance) for s in sides[1:]) if first is not None else ()
    return Comparison(tuple(sides), diffs, note)


def jobs_to_compare(reader: StoreReader, job: str | None, *,
                    until_ts: float | None = None) -> tuple[list[str], str | None]:
    """What the app compares the job on screen with: its parent (a fork) or its earlier
    run (`cockpit diff`'s baseline), else every job of the recording (at most
    MAX_SIDES, in the order they started); and a note when that leaves one job."""
    jobs = reader.jobs(until_ts=until_ts)
    if job is None or job not in jobs:
        job = reader.current_job(until_ts=until_ts)
    if job is None:
        return [], "the recording has no job yet"
    base = baseline_of(job, reader.forked_from(job, until_ts=until_ts), jobs)
    if base is not None:
        return [base, job], None
    if len(jobs) < 2:
        return [job], f"{job} is the recording's only job: give another recording " \
                      "(cockpit compare A B)"
    return ([job, *[j for j in jobs if j != job]])[:MAX_SIDES], None


def compare_in_recording(reader: StoreReader, recording: str, job: str | None = None, *,
                         until_ts: float | None = None) -> Comparison:
    """The comparison the app's compare screen shows (`Source.details("compare")`),
    remembered until the recording's newest record moves KPI_REFRESH_S on: it sums each
    job's whole history (its KPIs, its speed), too much to redo at every refresh."""
    jobs, note = jobs_to_compare(reader, job, until_ts=until_ts)
    newest = reader.frontier(until_ts=until_ts)
    key = (recording, tuple(jobs), until_ts is None,
           None if newest is None else int(newest // KPI_REFRESH_S))
    return reader.memo("compare", key, lambda: comparison(
        [side_of(reader, recording, j, until_ts=until_ts) for j in jobs], note))


def _job_in(reader: StoreReader, path: Path, name: str, job: str | None) -> str:
    jobs = reader.jobs()
    if job is None:
        found = reader.current_job()
        if found is None:
            raise CockpitError(f"{name} records no job")
        return found
    if job not in jobs:
        # The jobs are the recording's names (the hosts'): shown as text.
        raise CockpitError(f"{printable(name)} has no job {job!r}; its jobs: "
                           f"{printable(', '.join(jobs) or 'none')}")
    return job


def parse_sides(texts: Sequence[str]) -> list[tuple[Path, str | None]]:
    """Each `REC` or `REC:JOB` checked before any is read: a typo in the third costs
    nothing to fix."""
    if len(texts) < 2:
        raise CockpitError("compare needs at least two sides: cockpit compare A B [C…]")
    if len(texts) > MAX_SIDES:
        raise CockpitError(f"compare shows at most {MAX_SIDES} sides, {len(texts)} given")
    return [parse_side(t) for t in texts]


def load_comparison(sides: Sequence[tuple[Path, str | None, str]]) -> Comparison:
    """Each (file to read, job or None for its main job, the recording's name) read,
    each recording opened once, read-only."""
    out: list[Side | None] = [None] * len(sides)
    by_file: dict[Path, list[int]] = {}
    for i, (path, _job, _name) in enumerate(sides):
        by_file.setdefault(path.resolve(), []).append(i)
    for path, indices in by_file.items():
        with reading(path, sides[indices[0]][2]) as (_store, reader):
            for i in indices:
                _path, job, name = sides[i]
                out[i] = side_of(reader, name, _job_in(reader, path, name, job))
    return comparison([s for s in out if s is not None])


# --- rows (pure) ----------------------------------------------------------------------------


def _loss_cell(point: tuple[int, float] | None) -> str:
    return NOT_RECORDED if point is None else f"{point[1]:.4g} @ step {point[0]:,}"


def _rate(value: float | None) -> str:
    if value is None:
        return NOT_RECORDED
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def short_labels(c: Comparison) -> list[str]:
    """What a column or a legend entry calls each side: the job's name when the sides
    share one recording or have distinct names (the sides' section says which recording
    each is from); else REC:JOB."""
    jobs = [s.job for s in c.sides]
    if len({s.recording for s in c.sides}) == 1 or len(set(jobs)) == len(jobs):
        return jobs
    return [s.label for s in c.sides]


def metric_rows(c: Comparison) -> Table:
    """(header, rows): final and best losses, the last step, and the speed."""
    header = ("metric", *short_labels(c))
    rows: list[tuple[str, ...]] = [
        ("last step", *(NOT_RECORDED if s.last_step is None else f"{s.last_step:,}"
                        for s in c.sides)),
        ("final loss", *(_loss_cell(s.final_loss) for s in c.sides)),
        ("best loss", *(_loss_cell(s.best_loss) for s in c.sides)),
        ("final val loss", *(_loss_cell(s.final_val) for s in c.sides)),
        ("best val loss", *(_loss_cell(s.best_val) for s in c.sides)),
        ("steps/s", *(_rate(s.speed.steps_per_s) for s in c.sides)),
    ]
    if any(s.speed.samples_per_s is not None for s in c.sides):
        rows.append(("samples/s", *(_rate(s.speed.samples_per_s) for s in c.sides)))
    if any(s.speed.tokens_per_s is not None for s in c.sides):
        rows.append(("tokens/s", *(_rate(s.speed.tokens_per_s) for s in c.sides)))
    rows.append(("speed from", *(s.speed.basis or NOT_RECORDED for s in c.sides)))
    return header, rows


def kpi_table(c: Comparison) -> Table:
    """Each side's KPI rows (`cockpit report --kpis`), aligned by name."""
    per_side = [dict(kpi_rows(s.kpis)) for s in c.sides]
    names: list[str] = []
    for rows in per_side:  # a row only some sides have goes after its neighbour above
        at = 0
        for n in rows:
            if n in names:
                at = names.index(n) + 1
            else:
                names.insert(at, n)
                at += 1
    return (("KPI", *short_labels(c)),
            [(n, *(rows.get(n, NOT_RECORDED) for rows in per_side)) for n in names])


def provenance_table(c: Comparison) -> Table:
    """(section, key, each side's value): every key that differs between the first side
    and any other, from `cockpit diff`'s changes; a side that does not differ from the
    first on a key shows the first's value. At most DIFF_ROWS_PER_SECTION per section."""
    header = ("section", "key", *short_labels(c))
    first: dict[tuple[str, str], Any] = {}
    theirs: list[dict[tuple[str, str], Any]] = []
    order: list[tuple[str, str]] = []
    for d in c.diffs:
        mine = {}
        for ch in d.changes:
            key = (ch.section, ch.key)
            first.setdefault(key, ch.old)
            mine[key] = ch.new
            if key not in order:
                order.append(key)
        theirs.append(mine)
    rows: list[tuple[str, ...]] = []
    shown: dict[str, int] = {}
    for key in order:
        section = key[0]
        shown[section] = shown.get(section, 0) + 1
        if shown[section] > DIFF_ROWS_PER_SECTION:
            continue
        rows.append((*key, value_text(first[key]),
                     *(value_text(m[key] if key in m else first[key]) for m in theirs)))
    for section, n in shown.items():
        if n > DIFF_ROWS_PER_SECTION:
            rows.append((section, f"… {n - DIFF_ROWS_PER_SECTION:,} more",
                         *([""] * len(c.sides))))
    return header, rows


def relation_rows(c: Comparison) -> Rows:
    """How each other side relates to the first (a fork of it, …) and what changed."""
    out: Rows = []
    labels = short_labels(c)
    for label, d in zip(labels[1:], c.diffs, strict=True):
        out.append((f"{labels[0]} → {label}", d.relation or d.summary()))
        if d.relation:
            out.append(("", d.summary()))
    return out


def as_data(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (no curves: `cockpit export` has the series)."""
    return {
        "compare_version": COMPARE_VERSION,
        "note": c.note,
        "sides": [{
            "label": s.label, "recording": s.recording, "job": s.job,
            "last_step": s.last_step,
            **{name: None if p is None else {"step": p[0], "loss": p[1]}
               for name, p in (("final_loss", s.final_loss), ("best_loss", s.best_loss),
                               ("final_val_loss", s.final_val),
                               ("best_val_loss", s.best_val))},
            "speed": asdict(s.speed), "kpis": asdict(s.kpis),
        } for s in c.sides],
        "diffs": [as_json(d) for d in c.diffs],
    }


def render_comparison(c: Comparison, fmt: str = "text") -> str:
    if fmt not in FORMATS:
        raise CockpitError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json_printable(json.dumps(as_data(c), indent=2, ensure_ascii=False,
                                         default=str)) + "\n"
    labels = short_labels(c)
    sides: Rows = [(label, s.label) for label, s in zip(labels, c.sides, strict=True)]
    if c.note:
        sides.append(("note", c.note))
    prov = provenance_table(c)
    sections: list[tuple[str, Rows, list[Table]]] = [
        ("Sides", sides, []),
        ("Metrics", [], [metric_rows(c)]),
        ("Provenance", relation_rows(c) or [("differences", "none")],
         [prov] if prov[1] else []),
        ("KPIs", [], [kpi_table(c)]),
    ]
    return render_sections(sections, markdown=fmt == "markdown",
                           title="Compare: " + " vs ".join(s.label for s in c.sides))


def axis_label(axis: str, value: float) -> str:
    """A tick of the time axis: the time since the job's first step."""
    return duration(value) if axis == TIME_AXIS else f"{value:,.0f}"


__all__ = ["AXES", "COMPARE_VERSION", "MAX_SIDES", "STEP_AXIS", "TIME_AXIS", "Comparison",
           "Curve", "Side", "Speed", "as_data", "axis_label", "compare_in_recording",
           "comparison", "jobs_to_compare",
           "kpi_table", "load_comparison", "metric_rows", "parse_sides", "provenance_table",
           "relation_rows", "render_comparison", "short_labels", "side_of"]
