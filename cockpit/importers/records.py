"""Metric points -> wire records -> `Store.ingest`, shared by every importer.

A point is (step, wall time, name, value). Points of one step become one `train` record
(its mapped fields, the rest under `extra`) and, when the step has validation metrics,
one `eval` record; a name seen twice at one step starts a second record, so no point is
dropped. A logged step's `step_time` is the wall time since the previous one (unless the
run logged its own), covering `extra.steps` optimizer steps when it logged every N.

Steps, times and values are untrusted: a step outside 0..2**53, a time that is
not a finite positive number, or a value that is not a number is skipped and counted,
and a non-finite loss is kept as the protocol says (`loss: null`, `nonfinite`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agent.wire.protocol import EVAL, RUN, TRAIN
from cockpit.importers.mapping import EXTRA, METRIC, field_for
from cockpit.store.database import Store

MAX_STEP = 2**53
MAX_TS = 2**40  # seconds: year 36812, far past any real clock, far below overflow
MAX_NAME = 200
CHUNK_LINES = 2000
_JOB_UNSAFE = re.compile(r"[^A-Za-z0-9._=+@-]+")


def job_name(text: str) -> str:
    """A job name from a run directory or file name: no path separators, no controls,
    not empty, not leading '-', at most 128 characters."""
    name = _JOB_UNSAFE.sub("_", text).strip("_.-")[:128]
    return name or "imported"


@dataclass(frozen=True)
class Point:
    step: int
    wall: float
    name: str
    value: float


@dataclass
class ImportCounts:
    points: int = 0
    records: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str, n: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + n


def valid_point(step: Any, wall: Any, name: Any, value: Any,
                counts: ImportCounts) -> Point | None:
    if isinstance(step, bool) or not isinstance(step, int):
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        else:
            counts.skip("step not an integer")
            return None
    if not 0 <= step < MAX_STEP:
        counts.skip("step out of range")
        return None
    if (isinstance(wall, bool) or not isinstance(wall, (int, float))
            or not math.isfinite(wall) or not 0 < wall < MAX_TS):
        counts.skip("time not a valid timestamp")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        counts.skip("value not a number")
        return None
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        counts.skip("name empty or too long")
        return None
    return Point(step, float(wall), name, float(value))


def _nonfinite(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def records_for(job: str, points: Iterable[Point], overrides: Mapping[str, str] | None,
                counts: ImportCounts) -> list[dict[str, Any]]:
    """The job's `run` record, then its train and eval records in step order."""
    by_step: dict[int, list[Point]] = {}
    for p in points:
        by_step.setdefault(p.step, []).append(p)
        counts.points += 1
    out: list[dict[str, Any]] = [{"t": RUN, "ts": min((p.wall for ps in by_step.values()
                                                          for p in ps), default=1.0),
                                  "job": job, "rank": 0, "world_size": 1}]
    prev: tuple[int, float] | None = None  # (step, wall time) of the previous train record
    for step in sorted(by_step):
        trains: list[dict[str, Any]] = []
        evals: list[dict[str, Any]] = []
        for p in sorted(by_step[step], key=lambda p: p.wall):
            where = field_for(p.name, overrides)
            if where == "ignore":
                continue
            if where == "val_loss" or where == METRIC:
                key, target, nested = ("loss", evals, None) if where == "val_loss" else (
                    p.name, evals, "metrics")
                kind = EVAL
            elif where == EXTRA:
                key, target, nested, kind = p.name, trains, "extra", TRAIN
            else:
                key, target, nested, kind = where, trains, None, TRAIN
            if (key != "loss" or kind != TRAIN) and not math.isfinite(p.value):
                counts.skip(f"non-finite {key}")
                continue
            _place(target, kind, job, step, p, key, nested)
        if trains:
            prev = _timed(trains[0], step, prev)
        out += trains + evals
    counts.records += len(out)
    return out


def _timed(rec: dict[str, Any], step: int, prev: tuple[int, float] | None
           ) -> tuple[int, float]:
    """A logged step's timing, as an adapter reports it: the wall time since the previous
    logged step as `step_time` and, when it covers several steps, their count as
    `extra.steps` (so speed, step time and ETA count optimizer steps, not log lines)."""
    wall = rec["ts"]
    if prev is not None and step > prev[0] and wall > prev[1]:
        rec.setdefault("step_time", wall - prev[1])
        if step - prev[0] > 1:
            rec.setdefault("extra", {}).setdefault("steps", step - prev[0])
    return step, wall


def _place(target: list[dict[str, Any]], kind: str, job: str, step: int, p: Point,
           key: str, nested: str | None) -> None:
    """Put the value in the first record of the step that lacks it (a name repeated at a
    step starts another record: every point is kept)."""
    for rec in target:
        holder = rec.setdefault(nested, {}) if nested else rec
        if key not in holder:
            break
    else:
        rec = {"t": kind, "ts": p.wall, "job": job, "rank": 0, "step": step}
        target.append(rec)
        holder = rec.setdefault(nested, {}) if nested else rec
    if kind == TRAIN and key == "loss" and not math.isfinite(p.value):
        holder["loss"], holder["nonfinite"] = None, _nonfinite(p.value)
    elif key in ("samples", "tokens") and p.value.is_integer():
        holder[key] = int(p.value)
    else:
        holder[key] = p.value


class RecordingWriter:
    """Appends wire records for one host to a recording, numbered after what it holds."""

    def __init__(self, dest: Path, host: str) -> None:
        self.host = host
        self.store = Store(dest)
        self._seq = self.store.high_water(host)
        self._lines: list[bytes] = []

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            self._seq += 1
            line = {"t": rec["t"], "seq": self._seq, **{k: v for k, v in rec.items()
                                                        if k != "t"}}
            self._lines.append(orjson.dumps(line) + b"\n")
            if len(self._lines) >= CHUNK_LINES:
                self.flush()

    def add_lines(self, lines: Iterable[bytes]) -> None:
        """Wire lines as they are (a wire recording): their own seqs stand."""
        for line in lines:
            self._lines.append(line if line.endswith(b"\n") else line + b"\n")
            if len(self._lines) >= CHUNK_LINES:
                self.flush()

    def flush(self) -> None:
        if self._lines:
            self.store.ingest(self.host, b"".join(self._lines))
            self._lines = []

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.store.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
