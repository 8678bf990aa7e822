"""JSONL / NDJSON metric logs: one JSON object per line, one line per step.

The step is the first of `step`, `global_step`, `_step`, `iteration`, `iter` a line has
(else the line's number); its time the first of `ts`, `time`, `timestamp`, `_timestamp`,
`wall_time` (seconds since the epoch; else the file's modification time, and speed is
then unknown). Every other numeric key is a metric, mapped by the rules of
`cockpit.importers.mapping`. A line that is not a JSON object is skipped and counted;
`NaN` and `Infinity`, which Python's `json` writes for a diverged loss, are read. A line
over `MAX_LINE` bytes is skipped unread (`cockpit.importers.lines`).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from cockpit.importers.lines import read_lines
from cockpit.importers.records import ImportCounts, Point, valid_point

STEP_KEYS = ("step", "global_step", "_step", "iteration", "iter")
TIME_KEYS = ("ts", "time", "timestamp", "_timestamp", "wall_time")
MAX_LINE = 1 << 20


def read_log(path: Path, counts: ImportCounts) -> list[Point]:
    """Every point of the log; a skipped line or point is counted with its line number,
    and a compressed log cut short keeps the lines before the damage (`lines`)."""
    fallback_ts = path.stat().st_mtime
    points: list[Point] = []
    for number, raw in read_lines(path, MAX_LINE, counts):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:  # Python's json.dumps writes NaN and Infinity, which JSON lacks
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                counts.skip("not JSON", where)
                continue
        if not isinstance(obj, dict):
            counts.skip("not a JSON object", where)
            continue
        step = next((obj[k] for k in STEP_KEYS if k in obj), number - 1)
        ts = next((obj[k] for k in TIME_KEYS if k in obj), fallback_ts)
        for name, value in obj.items():
            if name in STEP_KEYS or name in TIME_KEYS:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # text fields (a run id, a phase name) are not metrics
            p = valid_point(step, ts, name, value, counts, where)
            if p is not None:
                points.append(p)
    return points
