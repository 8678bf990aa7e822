"""Text formatting shared by the panes.

Every formatter takes `None` and answers "n/a": a source that cannot give a field says
so on screen instead of showing a misleading zero.
"""

from __future__ import annotations

import time

NA_TEXT = "n/a"


def na(value: object, fmt: str = "{}") -> str:
    """Format `value` with `fmt`, or "n/a" when the source did not provide it."""
    if value is None:
        return NA_TEXT
    return fmt.format(value)


def duration(seconds: float | None) -> str:
    """Compact human duration ("3d 4h", "2h 10m", "45s") for ETAs and recovery times."""
    if seconds is None:
        return NA_TEXT
    s = max(0, round(seconds))
    days, rem = divmod(s, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str = "") -> str:
    """Scale large counts (tokens, samples, rates) so they fit a gauge label."""
    if value is None:
        return NA_TEXT
    for factor, prefix in _SI:
        if abs(value) >= factor:
            return f"{value / factor:.3g}{prefix}{unit}"
    if float(value).is_integer():
        return f"{int(value)}{unit}"
    return f"{value:.3g}{unit}"


def size(num_bytes: float | None) -> str:
    """Binary byte sizes (memory, disk) as the operator's tools show them."""
    if num_bytes is None:
        return NA_TEXT
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}TiB"


def percent(value: float | None, digits: int = 0) -> str:
    if value is None:
        return NA_TEXT
    return f"{value:.{digits}f}%"


def ratio(used: float | None, total: float | None) -> float | None:
    """Share of `total` in percent, or None when either side is unknown or empty."""
    if used is None or not total:
        return None
    return 100.0 * used / total


def clock(ts: float | None) -> str:
    """Wall-clock time of a timestamp in the operator's local zone."""
    if ts is None:
        return NA_TEXT
    return time.strftime("%H:%M:%S", time.localtime(ts))


def timestamp(ts: float | None) -> str:
    """Date and time of a timestamp in the operator's local zone, for run-level times
    (a run started yesterday must not read as a time of today)."""
    if ts is None:
        return NA_TEXT
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def loss(value: float | None) -> str:
    if value is None:
        return NA_TEXT
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:#.4g}"  # 1.470 beside 1.496, not 1.47: four figures, always
