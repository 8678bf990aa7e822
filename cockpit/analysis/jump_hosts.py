"""A jump host (ProxyJump) that is down, told as itself rather than as each host behind
it being down.

A link to a host behind a bastion fails at its first hop when the bastion is down, and
says so (`cockpit.transport.ssh_link.connect`: `jump host USER@ADDR:PORT: cannot
connect: …`). Those hosts are not down, and "check the host is up" for each would send
the operator to the wrong machines: one alert, the jump host's, names the hosts behind
it, and the Health pane marks each host as behind it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from cockpit.analysis.text import counted, where_text
from cockpit.snapshot import Alert

Row = Mapping[str, Any]

# The first hop failed, so nothing is known of the host behind it. ("jump host X cannot
# reach H:P" is another matter: the jump host answered, the host did not.)
_JUMP_DOWN = re.compile(r"^jump host (\S+): cannot connect")
_WHY = ": cannot connect: "


def jump_host_down(detail: str) -> str | None:
    """The jump host (`user@address:port`) a link's `detail` says is down, else None."""
    match = _JUMP_DOWN.match(detail)
    return match.group(1) if match else None


def jump_host_alerts(behind: Mapping[str, Sequence[Row]], *, now: float) -> list[Alert]:
    """One critical alert per jump host that is down (`behind`: its label -> the host
    rows behind it), naming those hosts; dated when the first of them lost its link."""
    out = []
    for jump, rows in sorted(behind.items()):
        names = sorted(str(r.get("host")) for r in rows)
        detail = str(rows[0].get("detail") or rows[0].get("last_error") or "")
        why = detail.split(_WHY, 1)[1] if _WHY in detail else ""
        since = [float(r["state_since"]) for r in rows if r.get("state_since") is not None]
        out.append(Alert(
            ts=min(since) if since else float(now), kind="resource", severity="critical",
            code="jump_host_unreachable",
            where=where_text({"jump host": jump, "behind it": ", ".join(names)}),
            what=(f"jump host {jump} is unreachable" + (f" ({why})" if why else "")
                  + f"; {counted(len(names), 'host')} behind it cannot be reached: "
                  + ", ".join(names)),
            hint=(f"check the jump host {jump} (is it up, and reachable from here?); the "
                  "hosts behind it are out until it answers, and their agents keep "
                  "recording"),
        ))
    return out
