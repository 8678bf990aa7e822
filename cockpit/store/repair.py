"""Salvage a wire record the strict reader refused because of some of its values.

One value a column cannot hold (an integer past 64 bits, an infinite float, a string
where a number goes) made DuckDB refuse the whole line, and with it the loss and every
other field of that step. Such a record is stored without those values instead (null,
which the cockpit shows as n/a), and the store notes which fields it lost and why.
A record whose type, seq, timestamp, or step (GPU index) is unusable is not salvaged: it
stays malformed.
"""

from __future__ import annotations

import json
import math
from typing import Any

from cockpit.store.schema import RECORD_COLUMNS

_INT_BITS = {"BIGINT": 63, "INTEGER": 31}
_NUMBERS = ("DOUBLE",)
_IDENTITY = {"t": str, "seq": int}
# Fields a record is placed by (a step on the chart, a GPU in the grid): without a usable
# one the record is not salvaged.
_PLACED_BY = {"train": ("step",), "eval": ("step",), "gpu": ("gpu",)}


def repair(line: bytes, table: str | None) -> tuple[bytes, list[str]] | None:
    """(the line with the values its columns cannot hold set to null, their names), or
    None when the line is not a record or nothing in it needs (or admits) repair."""
    try:
        record = json.loads(line)  # Python's reader: big integers and Infinity parse
    except (ValueError, RecursionError):  # RecursionError: nested past its depth
        return None
    if not isinstance(record, dict) or not _identity_ok(record):
        return None
    columns = RECORD_COLUMNS.get(table, {}) if table else {}
    dropped = []
    for key, value in record.items():
        if key in _IDENTITY:
            continue
        if key == "ts":
            if not _fits(value, "DOUBLE"):
                return None  # a record without a time cannot be placed
            continue
        if not _fits(value, columns.get(key, "JSON")):
            if key in _PLACED_BY.get(table or "", ()):
                return None
            record[key] = None
            dropped.append(key)
    if not dropped:
        return None
    return json.dumps(record, separators=(",", ":"), allow_nan=False).encode(), dropped


def _identity_ok(record: dict[str, Any]) -> bool:
    return all(isinstance(record.get(k), kind) and not isinstance(record.get(k), bool)
               for k, kind in _IDENTITY.items())


def _fits(value: Any, sql_type: str) -> bool:
    if value is None:
        return True
    if sql_type in _INT_BITS:
        bound = 1 << _INT_BITS[sql_type]
        return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
    if sql_type in _NUMBERS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        try:
            return math.isfinite(float(value))
        except OverflowError:  # an integer past any double
            return False
    if sql_type == "BOOLEAN":
        return isinstance(value, bool)
    if sql_type == "VARCHAR":
        return isinstance(value, str | int | float | bool) and _json_ok(value)
    return _json_ok(value)


def _json_ok(value: Any) -> bool:
    """Standard JSON that DuckDB reads back: no NaN/Infinity, no integer past 64 bits."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -(1 << 63) <= value < (1 << 64)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_ok(v) for v in value)
    if isinstance(value, dict):
        return all(_json_ok(v) for v in value.values())
    return False
