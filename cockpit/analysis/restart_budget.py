"""The job-wide restart budget, as the agents' decisions report it
(agent.job.restart_budget): how many failures of the cause the job last restarted from
it has had within the window, of how many allowed, and of the job's total. Shown in the
Health pane and the report, so an operator sees a restart loop closing in before the
job stops itself.

The figures come from a host: each is checked here and left out when it is not a whole
number (or, for the window, a finite positive number)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from agent.wire import launch_reasons
from cockpit.analysis.text import duration


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def budget_text(budget: Mapping[str, Any] | None) -> str | None:
    """"killed: 2 of 3 in 1h 00m (1 left); all causes: 2 of 10 (8 left), job-wide", or None
    when the decision carried no budget."""
    if not isinstance(budget, Mapping):
        return None
    parts = []
    cause, used, limit = budget.get("cause"), _whole(budget.get("used")), _whole(
        budget.get("limit"))
    window = budget.get("window")
    span = (f" in {duration(float(window))}" if isinstance(window, (int, float))
            and not isinstance(window, bool) and math.isfinite(window) and window > 0 else "")
    if isinstance(cause, str) and used is not None:
        of = f" of {limit}{span} ({max(limit - used, 0)} left)" if limit is not None else span
        parts.append(f"{cause}: {used}{of}")
    total, total_limit = _whole(budget.get("total_used")), _whole(budget.get("total_limit"))
    if total is not None and total_limit is not None:
        parts.append(f"all causes: {total} of {total_limit} ({max(total_limit - total, 0)} "
                     "left)")
    if not parts:
        return None
    text = "; ".join(parts) + ", job-wide"
    for key in ("unread", "unwritten"):
        if isinstance(budget.get(key), str):
            text += " (this host's count only: the shared dir did not answer)"
            break
    return text


def newest_budget(interruptions: Iterable[Mapping[str, Any]]) -> str | None:
    """The budget as the newest interruption that carried one left it; none once the
    operator started the job again after it (a launch, resume, relaunch or scale ended
    that outage): the agents count afresh from that start, and the next decision's
    budget says their new count."""
    for item in sorted(interruptions, key=lambda i: i.get("detected_at") or 0.0,
                       reverse=True):
        if item.get("ended_by") in launch_reasons.OPERATOR_STARTS:
            return None
        text = budget_text(item.get("budget"))
        if text is not None:
            return text
    return None
