"""What an agent's acknowledgement of a control op says, read the same way by the
command line (which waits for it) and the screen (which follows it after "sent")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cockpit.analysis.lifecycle import dict_field


def ack_outcome(ack: Mapping[str, Any]) -> tuple[bool, str]:
    """(accepted, what the agent said): its message when it accepted, its error when it
    refused (the reason is what the operator needs, e.g. "job 'duo' is paused")."""
    data = dict_field(ack, "data")
    detail = str(ack.get("msg") or "")
    ok = bool(data.get("ok"))
    if not ok:
        detail = str(data.get("error") or detail or "refused")
    return ok, detail
