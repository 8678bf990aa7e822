"""What a job's lifecycle events say about it, whatever form their `data` was stored in."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
