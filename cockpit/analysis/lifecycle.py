"""What a job's lifecycle events say about it, whatever form their `data` was stored in."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

# Newest lifecycle event kinds after which a job's processes are gone (a pause that
# failed is not one: the job keeps running).
ENDING_KINDS = frozenset({"job_exited", "pause"})


def event_data(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event's `data` as a dict: stored as JSON text or a dict, {} when neither."""
    data = event.get("data")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    return data if isinstance(data, dict) else {}


def paused(event: Mapping[str, Any]) -> bool:
    """A pause (or freeze) that took effect; the agent marks one that failed `ok: false`."""
    return event.get("kind") == "pause" and event_data(event).get("ok") is not False


def ended(event: Mapping[str, Any] | None) -> bool:
    """Whether the job's processes stopped with this event (it exited or was paused)."""
    if event is None or event.get("kind") not in ENDING_KINDS:
        return False
    return event.get("kind") == "job_exited" or paused(event)


def gave_up(event: Mapping[str, Any]) -> bool:
    """An interruption after which the agent stopped retrying (a host excluded from an
    elastic job is not one: the others go on without it)."""
    if event.get("kind") != "interruption":
        return False
    data = event_data(event)
    decision = data.get("decision") if isinstance(data.get("decision"), dict) else {}
    return decision.get("retry") is False and not data.get("exclusion")


def hosts_given_up(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Hosts whose newest start-or-interruption is one their agent gave up after. On a
    multi-host job the job's newest event can be another host's restart into a
    rendezvous the failed host will never join: the job is failed all the same."""
    newest: dict[str, Mapping[str, Any]] = {}
    for event in sorted(events, key=lambda e: (float(e.get("ts") or 0.0), e.get("seq") or 0)):
        if event.get("kind") in ("interruption", "job_started") and event.get("host"):
            newest[str(event["host"])] = event
    return sorted(host for host, event in newest.items() if gave_up(event))
