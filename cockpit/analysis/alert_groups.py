"""Alerts of several GPUs of one host folded into one: a host's cooling or power fails
for all its GPUs at once, and a rack's for dozens; an alert per GPU would bury the one
that names the host among as many lines as it has GPUs.

An acknowledgement of such an alert holds while the alert covers no GPU it did not
cover when acknowledged (`covered`): one GPU of eight cooling down is no news, a GPU
joining the group is."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable
from functools import lru_cache
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


# A GPU index as `index_ranges` writes it: ASCII digits only (`str.isdigit` takes "²",
# which `int` refuses; a host's name can hold anything).
_NUMBER = re.compile(r"[0-9]{1,6}")


@lru_cache(maxsize=1024)  # asked per alert and acknowledgement at every refresh
def gpu_scope(where: str) -> tuple[str, frozenset[str]] | None:
    """(what precedes the GPUs, the GPU indexes as text) of a GPU alert's where, as
    `where_text` writes it: "host a / gpu 3", "host a / gpus 0-2, 5"; None for any other
    place, or one whose GPU list cannot be read back."""
    for word in (" / gpus ", " / gpu "):
        head, found, tail = where.rpartition(word)
        if found:
            break
    else:
        return None
    if word == " / gpu ":
        return head, frozenset((tail,))
    indexes: set[str] = set()
    for part in tail.split(", "):
        low, dash, high = part.partition("-")
        if dash and _NUMBER.fullmatch(low) and _NUMBER.fullmatch(high) and (
                int(low) <= int(high)):
            if int(high) - int(low) > 4096:  # no host has that many GPUs: not ours
                return None
            indexes.update(str(i) for i in range(int(low), int(high) + 1))
        elif part:
            indexes.add(part)
    return (head, frozenset(indexes)) if indexes else None


def covered(code: str, where: str, acked: Collection[tuple[str, str]]) -> bool:
    """Whether an acknowledgement in `acked` ((code, where) pairs) holds for this alert:
    the very same one, or, for a GPU alert, one of the same code and host that named
    every GPU this one names (a group that lost GPUs to recovery is still the alert the
    operator saw; one that gained a GPU is not)."""
    if (code, where) in acked:
        return True
    scope = gpu_scope(where)
    if scope is None:
        return False
    head, gpus = scope
    for acked_code, acked_where in acked:
        if acked_code != code:
            continue
        seen = gpu_scope(acked_where)
        if seen is not None and seen[0] == head and gpus <= seen[1]:
            return True
    return False
