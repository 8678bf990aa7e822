"""Metric points -> wire records -> `Store.ingest`, shared by every importer.

A point is (step, wall time, name, value). Points of one step become one `train` record
(its mapped fields, the rest under `extra`) and, when the step has validation metrics,
one `eval` record; a name seen twice at one step starts a second record, so no point is
dropped. A logged step's `step_time` is the wall time since the previous one (unless the
run logged its own), covering `extra.steps` optimizer steps when it logged every N.

Steps, times and values are untrusted: a step outside 0..2**53, a time that is
not a finite positive number, a value that is not a number or one too big for a float
(JSON's integers have no bound), or a `samples`/`tokens` count that is not a whole number
in 0..2**63 (the store's BIGINT) is skipped and counted, the first few of each reason
with where they were (`ImportCounts.samples`), so the operator can find them; a
non-finite loss is kept as the protocol says (`loss: null`, `nonfinite`). What the store
made of the records (stored, refused as malformed, already held) is counted from its own
answer, so the summary claims only what happened.
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
from cockpit.store.database import IngestResult, Store

MAX_STEP = 2**53
MAX_TS = 2**40  # seconds: year 36812, far past any real clock, far below overflow
MAX_NAME = 200
MAX_COUNT = 2**63  # samples and tokens: the store's BIGINT
SAMPLES = 5  # where the first few skipped points of each reason were
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
    """What one import read, skipped and stored; the command's summary says it."""

    points: int = 0  # metric points read (a wire recording: its lines)
    sent: int = 0  # records handed to the store
    records: int = 0  # records the store stored
    malformed: int = 0  # records it refused (kept in the recording's wire errors)
    duplicates: int = 0  # records it already held
    skipped: dict[str, int] = field(default_factory=dict)
    # where the first SAMPLES skipped for each reason were: "line 12", "tag 'loss' step 5"
    samples: dict[str, list[str]] = field(default_factory=dict)
    # why an input was not read to its end, each naming its file (the command fails)
    problems: list[str] = field(default_factory=list)

    def skip(self, why: str, where: str | None = None, n: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + n
        if where is not None:
            kept = self.samples.setdefault(why, [])
            if len(kept) < SAMPLES:
                kept.append(where)

    def stored(self, result: IngestResult) -> None:
        self.records += result.stored
        self.malformed += result.malformed
        self.duplicates += result.duplicates
        self.problems += [f"host {host}: not stored: {error}" for host, error in result.failed]


def valid_point(step: Any, wall: Any, name: Any, value: Any, counts: ImportCounts,
                where: str | None = None) -> Point | None:
    """The point, or None when one of its parts is not what the protocol can carry (the
    reason counted, with `where`). Ranges are compared before any conversion: a JSON
    integer of 400 digits is a Python int that `float()` refuses."""
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int):
        counts.skip("step not an integer", where)
        return None
    if not 0 <= step < MAX_STEP:
        counts.skip("step out of range", where)
        return None
    if (isinstance(wall, bool) or not isinstance(wall, (int, float))
            or not 0 < wall < MAX_TS):  # NaN and infinities fail the comparison too
        counts.skip("time not a valid timestamp", where)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        counts.skip("value not a number", where)
        return None
    try:
        number = float(value)
    except OverflowError:
        counts.skip("value out of range", where)
        return None
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        counts.skip("name empty or too long", where)
        return None
    if not _utf8(name):
        counts.skip("name not valid text", where)
        return None
    return Point(step, float(wall), name, number)


def _utf8(text: str) -> bool:
    """Whether `text` encodes (Python's `json` decodes a lone surrogate, `\\ud800`, that
    no UTF-8 writer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def count_value(value: float) -> int | None:
    """A `samples`/`tokens` value as the store's BIGINT takes it, or None."""
    if not value.is_integer() or not 0 <= value < MAX_COUNT:
        return None
    return int(value)


def _nonfinite(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def records_for(job: str, points: Iterable[Point], overrides: Mapping[str, str] | None,
                counts: ImportCounts) -> list[dict[str, Any]]:
    """The job's `run` record, then its train and eval records in step order; nothing at
    all when no point makes a record (an empty log would otherwise leave a job with no
    metrics, dated by a made-up start)."""
    by_step: dict[int, list[Point]] = {}
    for p in points:
        by_step.setdefault(p.step, []).append(p)
        counts.points += 1
    out: list[dict[str, Any]] = []
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
            value: float | int = p.value
            if (key != "loss" or kind != TRAIN) and not math.isfinite(p.value):
                counts.skip(f"non-finite {key}", f"step {step}")
                continue
            if key in ("samples", "tokens"):  # a count, as the store's BIGINT holds it
                count = count_value(p.value)
                if count is not None:
                    value = count
                elif nested is None:  # an `extra` of that name stays a float
                    counts.skip(f"{key} not a whole number in 0..2**63", f"step {step}")
                    continue
            _place(target, kind, job, step, p, key, nested, value)
        if trains:
            prev = _timed(trains[0], step, prev)
        out += trains + evals
    if not out:
        return []
    start = min(p.wall for ps in by_step.values() for p in ps)
    return [{"t": RUN, "ts": start, "job": job, "rank": 0, "world_size": 1}, *out]


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
           key: str, nested: str | None, value: float | int) -> None:
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
    if kind == TRAIN and key == "loss" and not math.isfinite(value):
        holder["loss"], holder["nonfinite"] = None, _nonfinite(value)
    else:
        holder[key] = value


class RecordingWriter:
    """Appends wire records for one host to a recording, numbered after what it holds,
    and counts what the store made of them (`ImportCounts.stored`): a line it refused or
    already held is not a record imported."""

    def __init__(self, dest: Path, host: str, counts: ImportCounts) -> None:
        self.host = host
        self.counts = counts
        self.store = Store(dest)
        self._seq = self.store.high_water(host)
        self._lines: list[bytes] = []

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            self._seq += 1
            line = {"t": rec["t"], "seq": self._seq, **{k: v for k, v in rec.items()
                                                        if k != "t"}}
            self._lines.append(orjson.dumps(line) + b"\n")
            self.counts.sent += 1
            if len(self._lines) >= CHUNK_LINES:
                self.flush()

    def add_lines(self, lines: Iterable[bytes]) -> None:
        """Wire lines as they are (a wire recording): their own seqs stand."""
        for line in lines:
            self._lines.append(line if line.endswith(b"\n") else line + b"\n")
            self.counts.sent += 1
            if len(self._lines) >= CHUNK_LINES:
                self.flush()

    def flush(self) -> None:
        if self._lines:
            result = self.store.ingest(self.host, b"".join(self._lines))
            self._lines = []
            self.counts.stored(result)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.store.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
