"""One failure, one interruption: the per-host accounts of it merged.

When a rank dies, its own host's agent sees the cause (killed, OOM, a GPU fault) and
every other host's agent sees its collectives fail on the lost peer (`nccl`, or an
`unknown` exit when torchrun tears the group down). Each agent journals what it saw, but
the operator lost work once, and the checkpoint advice (Daly) must count one failure, not
one per host. Accounts of the same job that start within `INCIDENT_WINDOW_S` of each
other, from different hosts, are one incident; its cause is the first account that
names one, not a consequence.

An incident is over when every host that had to come back did (a host excluded from an
elastic job, or one that gave up while its peers recovered, need not), or when the
operator ended it, or when the job trained again (its first step after the failure, on
any host: a Slurm requeue's restart reports no recovery of the watcher's interruption).
Its down time is the longest of its hosts' own, each on that host's clock (the agent's
`recovery_seconds`, from its failure to its first new step): hosts' clocks differ.

An `interruption` an older recording journaled for the operator's own stop (`scancel`)
is read as that stop: it ends the job's open outages and is no outage itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.wire import launch_reasons
from cockpit.analysis.causes import operator_end

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
    for item in _operator_ends(items):
        group = groups[-1] if groups else None
        if (group is not None and item.get("job") == group[0].get("job")
                and (item.get("detected_at") or 0.0) - (group[0].get("detected_at") or 0.0)
                <= window
                and item.get("host") not in {g.get("host") for g in group}):
            group.append(item)
        else:
            groups.append([item])
    return [_merged(group) for group in groups]


def _operator_ends(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The items oldest first, an operator's stop journaled as an interruption (older
    Slurm recordings: `scancel`) turned into the end of the job's outages still open."""
    out: list[dict[str, Any]] = []
    for item in sorted(items, key=lambda i: (i.get("detected_at") or 0.0)):
        if not operator_end(item.get("cause")):
            out.append(dict(item))
            continue
        for earlier in out:
            if (earlier.get("job") == item.get("job") and earlier.get("recovered_at") is None
                    and not earlier.get("ended_by")):
                earlier["ended_by"] = launch_reasons.FOR_STOP
    return list(out)


def _failed_at(item: Mapping[str, Any]) -> float:
    """When a host's part failed, on that host's clock (its detection less its latency)."""
    latency = item.get("detection_latency")
    lag = float(latency) if isinstance(latency, int | float) and latency > 0 else 0.0
    return float(item.get("detected_at") or 0.0) - lag


def _down(item: Mapping[str, Any]) -> float | None:
    """A recovered host's down time on its own clock: the agent's figure, else its
    recovery less its failure."""
    took = item.get("recovered_in")
    if isinstance(took, int | float):
        return float(took)
    back = item.get("recovered_at")
    return float(back) - _failed_at(item) if isinstance(back, int | float) else None


def _must_recover(group: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The hosts whose recovery ends the incident: not one excluded from the job, nor one
    that gave up (the job goes on with the others, or stays down if all gave up)."""
    return [g for g in group if not g.get("excluded")
            and not (g.get("gave_up") and g.get("recovered_at") is None)]


def _merged(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    primary = next((g for g in group if g.get("cause") not in CONSEQUENCES), group[0])
    merged = dict(primary)
    merged["hosts"] = tuple(dict.fromkeys(
        str(g.get("host")) for g in (primary, *group) if g.get("host") is not None))
    merged["detected_at"] = min(float(g.get("detected_at") or 0.0) for g in group)
    needed = _must_recover(group) or [g for g in group if g.get("recovered_at") is not None]
    downs = [_down(g) for g in needed]
    if needed and all(d is not None for d in downs):
        # The job trains again once the last host that had to does; each host's down
        # time is its own clock's, the incident's the longest of them.
        merged["recovered_at"] = max(float(g["recovered_at"]) for g in needed)
        merged["recovered_in"] = max(d for d in downs if d is not None)
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
    if merged["recovered_in"] is None and merged["ended_by"] is None:
        # No host's recovery ends it, yet the job trained again: it came back then.
        back = [float(b) for g in group if isinstance(b := g.get("came_back_at"), int | float)]
        if back:
            merged["recovered_at"] = min(back)
            merged["recovered_in"] = max(0.0, min(back) - min(_failed_at(g) for g in group))
    # The host whose restarts failed most (each host retries the same group).
    merged["failed_restarts"] = max((list(g.get("failed_restarts") or ()) for g in group),
                                    key=len)
    return merged


def _count(value: Any) -> int:
    """A count as a host sent it: a whole number, else none (0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
