"""Alert thresholds: defaults, and the `[alerts]` table of a TOML file that overrides them.

A team tunes what counts as "nearly full" or "a spike" once, in a file, rather than in
code: `cockpit --alerts FILE …` reads its `[alerts]` table (other tables are ignored, so
the same file can hold other settings). Every key is checked where it is read: an
unknown key, a value of the wrong type or out of its range is refused with the file,
the line and the key, as a keymap's mistakes are. The documented table:

    [alerts]
    disk_warn = 0.90             # disk used share that warns (0..1)
    disk_critical = 0.97         # ... that is critical
    memory_warn = 0.95           # host memory used share that warns
    memory_full = 0.97           # ... that the fleet map shows as full (no alert of its own)
    host_silent_s = 30           # a host with no record for this long is silent
    data_wait_warn_pct = 30      # input pipeline share of step time that warns
    loss_scale_collapse = 64     # AMP loss scale fallen this many times below its peak
    loss_scale_floor = 1.0       # ... or at/below this value
    grad_norm_explosion = 10     # grad norm this many times its recent median
    plateau_points = 30          # loss points (of the chart's) a plateau is judged over
    plateau_min_drop = 0.01      # smoothed loss falling less than this share over them
    oom_headroom = 0.85          # share of GPU memory a suggested micro-batch aims at
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from cockpit.analysis.text import printable
from cockpit.toml_lines import TomlLines

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib


@dataclass(frozen=True)
class AlertThresholds:
    disk_warn: float = 0.90
    disk_critical: float = 0.97
    memory_warn: float = 0.95
    memory_full: float = 0.97
    host_silent_s: float = 30.0
    data_wait_warn_pct: float = 30.0
    loss_scale_collapse: float = 64.0
    loss_scale_floor: float = 1.0
    grad_norm_explosion: float = 10.0
    plateau_points: int = 30
    plateau_min_drop: float = 0.01
    oom_headroom: float = 0.85


# (low, high) each key must lie within (inclusive), to refuse a typo like 90 for 0.90.
RANGES: dict[str, tuple[float, float]] = {
    "disk_warn": (0.0, 1.0), "disk_critical": (0.0, 1.0), "memory_warn": (0.0, 1.0),
    "memory_full": (0.0, 1.0),
    "host_silent_s": (1.0, 86400.0), "data_wait_warn_pct": (0.0, 100.0),
    "loss_scale_collapse": (1.0, 1e9), "loss_scale_floor": (0.0, 1e9),
    "grad_norm_explosion": (1.0, 1e9), "plateau_points": (3, 100_000),
    "plateau_min_drop": (0.0, 1.0), "oom_headroom": (0.05, 1.0),
}

DEFAULTS = AlertThresholds()
_current = DEFAULTS


class AlertConfigError(ValueError):
    """An alerts file that cannot be applied; the message names file, line and key.
    What it quotes of the file (a key, a parser's words) it shows as text (`printable`),
    wherever the message is printed."""

    def __init__(self, message: str) -> None:
        super().__init__(printable(message, multiline=True))


def current() -> AlertThresholds:
    """The thresholds in force (the defaults unless `configure` set others)."""
    return _current


def configure(thresholds: AlertThresholds) -> None:
    """Set the thresholds every rule reads, for this process (the CLI does, at start)."""
    global _current
    _current = thresholds


def _where(path: Path, lines: TomlLines, *key: str) -> str:
    """`FILE:LINE` of a key of the `[alerts]` table (the table's own line where the key is
    inside an inline one), or `FILE` alone where it is not found: no line rather than a
    wrong one."""
    line = lines.line("alerts", *key)
    return f"{path}:{line}" if line else str(path)


def load_alert_config(path: str | Path) -> AlertThresholds:
    """The defaults with the file's `[alerts]` table applied; AlertConfigError if any
    of it is wrong (nothing is half applied)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AlertConfigError(f"{path}: cannot read alerts config: "
                               f"{exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise AlertConfigError(f"{path}:{line}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise AlertConfigError(f"{path}: not valid TOML: {exc}") from exc
    table = data.get("alerts")
    if table is None:
        raise AlertConfigError(f"{path}: no [alerts] table")
    lines = TomlLines(text)
    if not isinstance(table, dict):
        raise AlertConfigError(f"{_where(path, lines)}: 'alerts' must be a table ([alerts])")
    known = {f.name: f.type for f in fields(AlertThresholds)}
    values: dict[str, Any] = {}  # each of its field's type, checked above
    for key, value in table.items():
        where = f"{_where(path, lines, key)}: alerts.{printable(key)}"
        if key not in known:
            raise AlertConfigError(f"{where} is not a threshold; known: "
                                   f"{', '.join(sorted(known))}")
        integer = known[key] in (int, "int")
        ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok:
            raise AlertConfigError(f"{where} must be {'an integer' if integer else 'a number'},"
                                   f" got {type(value).__name__}")
        low, high = RANGES[key]
        if not low <= value <= high:
            raise AlertConfigError(f"{where} = {value} is out of range ({low:g} to {high:g})")
        values[key] = value if integer else float(value)
    if "memory_full" not in values and values.get("memory_warn", 0.0) > DEFAULTS.memory_full:
        # A memory_warn above memory_full's default, with no memory_full: no level of
        # its own between them, full starts at the warning (not a file refused).
        values["memory_full"] = values["memory_warn"]
    thresholds = replace(DEFAULTS, **values)
    # A pair out of order names the line of the one the file sets (the other keeps its
    # default), the upper one where it sets both.
    for lower, upper in (("disk_warn", "disk_critical"), ("memory_warn", "memory_full")):
        if getattr(thresholds, upper) < getattr(thresholds, lower):
            culprit = upper if upper in table else lower
            raise AlertConfigError(f"{_where(path, lines, culprit)}: alerts.{upper} must not "
                                   f"be below alerts.{lower}")
    return thresholds
