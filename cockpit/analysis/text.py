"""Human wording for figures that appear inside analysis messages; `printable` (the one
function that makes untrusted text safe to put on a terminal) is `cockpit.printable`'s."""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent.wire import launch_reasons, states

# `printable` has its own module in the lowest layer (the links use it too); the analysis
# and the screens take it from here as well.
from cockpit.printable import UNSAFE as UNSAFE
from cockpit.printable import json_printable as json_printable
from cockpit.printable import printable as printable


def duration(seconds: float | None) -> str:
    """`42s`, `5m 03s`, `2h 10m`, `3d 4h`: coarse enough to read at a glance."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def size(num_bytes: float | None, sep: str = "") -> str:
    """Binary byte sizes (memory, disk) as the operator's tools show them: `1.5GiB` on a
    pane, `1.5 GiB` (`sep=" "`) in a report's table; "n/a" when unknown."""
    if num_bytes is None or not math.isfinite(num_bytes):
        return "n/a"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f}{sep}B" if unit == "B" else f"{value:.1f}{sep}{unit}"
        value /= 1024
    return f"{value:.1f}{sep}TiB"


def where_text(where: dict[str, object]) -> str:
    """`host a / gpu 3 / rank 5 / step 1200`, in that fixed order, skipping absent parts."""
    order = ("host", "gpu", "rank", "file", "range", "step")
    parts = [f"{k} {where[k]}" for k in order if where.get(k) is not None]
    parts += [f"{k} {v}" for k, v in where.items() if k not in order and v is not None]
    return " / ".join(parts) if parts else "job"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """"1 alert", "2 alerts": operators read these counts at a glance."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


# What ended an outage other than a recovery (`StoreReader.interruptions`' `ended_by`:
# the agent's words for an operator's start or the end of an attempt).
ENDED_BY = {launch_reasons.FOR_PAUSE: "the operator's pause",
            launch_reasons.FOR_STOP: "the operator's stop",
            launch_reasons.LAUNCH: "a new launch",
            launch_reasons.RESUME: "the operator's resume",
            launch_reasons.RELAUNCH: "a relaunch",
            launch_reasons.SCALE: "the operator's scale",
            launch_reasons.FOR_PEER: "the end of another host's part"}


def ended_text(ended_by: str) -> str:
    """"ended by the operator's pause": an outage that is over without a recovery."""
    return f"ended by {ENDED_BY.get(ended_by, ended_by)}"


def unrecovered_text(ended_by: str | None, newest: bool, state: str) -> str:
    """Why an outage has no recovery time, said alike by the screen and the report: it
    was ended otherwise, its restart is under way, or the agent gave up on it."""
    if ended_by:
        return ended_text(ended_by)
    # The newest outage may still recover: its agent waits to restart it, or has restarted
    # it and waits for the first step (an operator's start would have ended it instead).
    if newest and state in states.RESTARTING:
        return "not recovered yet"
    if newest and state == states.FAILED:
        return "not recovered: the agent stopped retrying"
    return "not recovered"


def failed_restarts_text(causes: Sequence[str]) -> str:
    """"1 failed: nccl": the restarts of one outage that died before their first step
    (often a peer's rendezvous failing while the group re-forms)."""
    return f"{len(causes)} failed: {', '.join(causes)}"
