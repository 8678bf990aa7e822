"""One failure, one interruption: the per-host accounts of it merged.

When a rank dies, its own host's agent sees the cause (killed, OOM, a GPU fault) and
every other host's agent sees its collectives fail on the lost peer (`nccl`, or an
`unknown` exit when torchrun tears the group down). Each agent journals what it saw, but
the operator lost work once, and the checkpoint advice (Daly) must count one failure, not
one per host. Accounts of the same job that start within `INCIDENT_WINDOW_S` of each
other, from different hosts, are one incident; its cause is the first account that
names one, not a consequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Peers notice a lost rank within their collective or rendezvous timeouts (seconds to a
# few minutes); a second failure of the same host is always a new incident.
INCIDENT_WINDOW_S = 180.0
# Causes a host reports when another host failed: they explain nothing by themselves.
CONSEQUENCES = frozenset({"nccl", "unknown"})


def merge_incidents(items: Iterable[Mapping[str, Any]],
                    window: float = INCIDENT_WINDOW_S) -> list[dict[str, Any]]:
    """`items`: per-host interruptions (`StoreReader.interruptions`), merged into one per
    incident, oldest first, each with `hosts` (every host that reported it)."""
    groups: list[list[Mapping[str, Any]]] = []
    for item in sorted(items, key=lambda i: (i.get("detected_at") or 0.0)):
        group = groups[-1] if groups else None
        if (group is not None and item.get("job") == group[0].get("job")
                and (item.get("detected_at") or 0.0) - (group[0].get("detected_at") or 0.0)
                <= window
                and item.get("host") not in {g.get("host") for g in group}):
            group.append(item)
        else:
            groups.append([item])
    return [_merged(group) for group in groups]


def _merged(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    primary = next((g for g in group if g.get("cause") not in CONSEQUENCES), group[0])
    merged = dict(primary)
    merged["hosts"] = tuple(dict.fromkeys(
        str(g.get("host")) for g in (primary, *group) if g.get("host") is not None))
    if len(group) == 1:
        return merged
    start = min(float(g.get("detected_at") or 0.0) for g in group)
    merged["detected_at"] = start
    recovered = [float(r) for g in group if (r := g.get("recovered_at")) is not None]
    if len(recovered) == len(group):
        # The job trains again once its last host does.
        merged["recovered_at"] = max(recovered)
        merged["recovered_in"] = merged["recovered_at"] - start
    else:
        merged["recovered_at"] = merged["recovered_in"] = None
    for key in ("steps_lost", "restart_count"):
        values = [v for g in group if (v := g.get(key)) is not None]
        merged[key] = max(values) if values else None
    # The restart budget as the host that had counted the most failures saw it.
    budgets = [b for g in group if isinstance(b := g.get("budget"), dict)]
    merged["budget"] = max(budgets, key=lambda b: _count(b.get("total_used")),
                           default=primary.get("budget"))
    # Not recovered: what ended it instead, as the first host that says so tells.
    merged["ended_by"] = None if merged["recovered_in"] is not None else next(
        (g.get("ended_by") for g in group if g.get("ended_by")), None)
    # The host whose restarts failed most (each host retries the same group).
    merged["failed_restarts"] = max((list(g.get("failed_restarts") or ()) for g in group),
                                    key=len)
    return merged


def _count(value: Any) -> int:
    """A count as a host sent it: a whole number, else none (0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
