"""One host on one line: its link, GPUs (one glyph each), temperature, power, memory,
disk and network. The GPU map shows hosts this way while there is room for a line each.

Glyphs and colours are the states of `cockpit.analysis.gpu_state`, which owns the
verdict; this module only formats.
"""

from __future__ import annotations

from textual.content import Content

from agent.wire.states import GPU_OK, GPU_SIMULATED
from cockpit.analysis import gpu_state as gs
from cockpit.analysis.gpu_state import GpuState, Level
from cockpit.analysis.timeline import UNREACHABLE_STATES
from cockpit.snapshot import GpuCell, HostHealth
from cockpit.ui import format as fmt

LEVEL_STYLE = {Level.ERROR: "$error", Level.WARNING: "$warning", Level.NOTICE: "$primary",
                Level.OK: "$success", Level.UNKNOWN: "$text-muted"}


def gpu_glyph(cell: GpuCell) -> str:
    """One GPU by its own state, as markup of the cockpit's own (no wire text)."""
    return state_glyph(gs.gpu_state(cell))


def state_glyph(state: GpuState) -> str:
    return f"[{LEVEL_STYLE[state.level]}]{state.glyph}[/]"


def _max(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def host_line(host: HostHealth, name_width: int,
              states: tuple[GpuState, ...] | None = None) -> Content:
    """`states`: the GPUs' as `gpu_state.gpu_states` gives them (their link counted),
    when the caller has them already."""
    cells = host.gpus
    link_style = ("$success" if host.state in gs.LINK_OK else "$warning"
                  if host.state in gs.LINK_WAIT else "$text-muted"
                  if host.state in gs.LINK_ENDED else "$error")
    states = gs.gpu_states(host) if states is None else states
    online = sum(gs.gpus_online(host, states))
    glyphs = "".join(map(state_glyph, states)) or "[$text-muted]-[/]"
    temp = fmt.na(_max([c.temp for c in cells]), "{:.0f}°C")
    power = fmt.na(_sum([c.power for c in cells]), "{:.0f}W")
    mem = fmt.percent(fmt.ratio(_sum([c.mem_used for c in cells]),
                                _sum([c.mem_total for c in cells])))
    disk = fmt.percent(fmt.ratio(host.disk_used, host.disk_total))
    net = f"net ↓{fmt.si(host.net_rx)} ↑{fmt.si(host.net_tx)}"
    # Names and states from the wire go in as text: padded here, not by the template.
    template = (f"$host [{link_style}]$state[/] "
                f"{online}/{len(cells)} {glyphs} {temp} {power} mem {mem} disk {disk} {net}")
    if host.gpu_state not in (GPU_OK, GPU_SIMULATED):
        template += " [$warning]($gpu_state)[/]"
    if host.behind and host.state in UNREACHABLE_STATES:  # its jump host is down, not itself
        template += " [$text-muted](behind jump host $behind, which is down)[/]"
    return fmt.markup(template, host=fmt.printable(host.host).ljust(name_width),
                      state=fmt.printable(host.state).ljust(10), gpu_state=host.gpu_state,
                      behind=fmt.printable(host.behind or ""))
