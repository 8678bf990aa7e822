"""Alerts of several GPUs of one host folded into one: a host's cooling or power fails
for all its GPUs at once, and a rack's for dozens; an alert per GPU would bury the one
that names the host among as many lines as it has GPUs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from cockpit.analysis.text import counted, where_text
from cockpit.snapshot import Alert


def per_host(alerts: list[Alert], of: list[tuple[Any, Any, bool]]) -> list[Alert]:
    """One alert for the GPUs of a host that raise the same one (a host's cooling or
    power fails for all its GPUs at once, and a rack's for dozens): where names the
    host and its GPUs, what the first GPU's figure and how many more. Simulated GPUs
    are grouped apart from real ones, so that a real alarm is never labelled SIM."""
    groups: dict[tuple[str, Any, bool], list[tuple[Alert, Any]]] = {}
    for alert, (host, gpu, sim) in zip(alerts, of, strict=True):
        groups.setdefault((alert.code, host, sim), []).append((alert, gpu))
    out = []
    for (_code, host, sim), members in groups.items():
        first, gpu = members[0]
        if len(members) > 1:
            first = dataclasses.replace(
                first, ts=max(a.ts for a, _ in members),
                where=where_text({"host": host, "gpus": index_ranges(g for _, g in members)}),
                what=f"{first.what} on gpu {gpu}, and on "
                     f"{counted(len(members) - 1, 'more GPU')}")
        if sim:  # a simulated GPU's alarm is a rehearsal: never unlabelled
            first = dataclasses.replace(first, what=f"SIM: {first.what} (simulated "
                                                    f"{'GPUs' if len(members) > 1 else 'GPU'})")
        out.append(first)
    return out


def index_ranges(indexes: Iterable[Any]) -> str:
    """GPU indexes as runs: "0-7", "0-2, 5"; an index that is not a whole number as
    it is, after them."""
    given = list(indexes)
    numbers = sorted({i for i in given if isinstance(i, int) and not isinstance(i, bool)})
    others = [str(i) for i in given if not (isinstance(i, int) and not isinstance(i, bool))]
    runs: list[str] = []
    start = prev = None
    for n in [*numbers, None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    return ", ".join(runs + others)
