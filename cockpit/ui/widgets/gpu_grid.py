"""One host on one line: its link, GPUs (one glyph each), temperature, power, memory,
disk and network. The GPU map shows hosts this way while there is room for a line each;
with room to spare, each host's GPUs follow one column each (`gpu_figures`): its
utilisation, memory, temperature and power, as a GPU monitor shows them.

Glyphs and colours are the states of `cockpit.analysis.gpu_state`, which owns the
verdict; this module only formats.
"""

from __future__ import annotations

from collections.abc import Callable

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


# A GPU's figures under its host, in the order they are given room: (label, the figure).
FIGURES: tuple[tuple[str, Callable[[GpuCell], float | None]], ...] = (
    ("util %", lambda c: c.util),
    ("mem %", lambda c: fmt.ratio(c.mem_used, c.mem_total)),
    ("temp °C", lambda c: c.temp),
    ("power W", lambda c: c.power),
)
FIGURE_INDENT = "    "
FIGURE_LABEL = 8  # the labels' width
FIGURE_COLUMN = 5  # a GPU's column: its glyph and index, or a figure, and a space


def _column(value: float | None) -> str:
    return (f"{value:>{FIGURE_COLUMN - 1}.0f} " if value is not None and value == value
            and abs(value) < 10 ** (FIGURE_COLUMN - 1) else f"{'–':>{FIGURE_COLUMN - 1}} ")


def gpu_figures(host: HostHealth, states: tuple[GpuState, ...], count: int) -> list[Content]:
    """`host`'s GPUs one column each, in the order of their glyphs on the host's line:
    a header of each GPU's glyph and index, then `count` lines of figures (`FIGURES`),
    each GPU's in the colour of its state. An offline GPU's last figures are not shown
    as if current: "–"."""
    if not host.gpus or count <= 0:
        return []
    styles = [LEVEL_STYLE[s.level] for s in states]
    head: list[tuple[str, str] | str] = [FIGURE_INDENT + "gpu".ljust(FIGURE_LABEL)]
    for cell, state, style in zip(host.gpus, states, styles, strict=False):
        head.append((f"{state.glyph}{cell.index}".rjust(FIGURE_COLUMN - 1) + " ", style))
    lines = [Content.assemble(*head)]
    for label, figure in FIGURES[:count]:
        parts: list[tuple[str, str] | str] = [FIGURE_INDENT + label.ljust(FIGURE_LABEL)]
        for cell, state, style in zip(host.gpus, states, styles, strict=False):
            shown = None if state is GpuState.OFFLINE else figure(cell)
            parts.append((_column(shown), style if shown is not None else "$text-muted"))
        lines.append(Content.assemble(*parts))
    return lines


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
