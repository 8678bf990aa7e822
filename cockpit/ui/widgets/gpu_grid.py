"""Hosts × GPUs at a glance: one line per host, one glyph per GPU.

Glyphs differ in shape as well as colour (● ok, ▲ throttled or hot, ✖ ECC/XID, ○
offline) so the grid reads the same in every theme and for colour-blind operators.
Hosts with a problem are listed first; with hundreds of hosts the healthy ones are
what the operator can afford to scroll past.
"""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from cockpit.analysis.throttle import BENIGN
from cockpit.snapshot import GpuCell, HostHealth
from cockpit.ui import format as fmt
from cockpit.ui.widgets.pane import update_text

HOT_CELSIUS = 85.0
LEGEND = ("[$success]●[/] ok  [$warning]▲[/] throttled/hot  [$error]✖[/] ECC/XID  "
          "[$error]○[/] offline")
_LINK_OK = {"streaming", "local"}
_LINK_WAIT = {"connecting", "stale", "deploying"}
# A link the cockpit closed itself (the end of a recording): no fault, nothing streams.
_LINK_ENDED = {"stopped"}


def gpu_problem(cell: GpuCell) -> str | None:
    """"error", "warning" or None for one GPU, by what the operator must act on."""
    if not cell.online or cell.xid or (cell.ecc_unc or 0) > 0:
        return "error"
    if (cell.throttle or 0) & ~BENIGN or (cell.temp or 0) >= HOT_CELSIUS:
        return "warning"
    return None


def gpu_glyph(cell: GpuCell) -> str:
    if not cell.online:
        return "[$error]○[/]"
    problem = gpu_problem(cell)
    if problem == "error":
        return "[$error]✖[/]"
    if problem == "warning":
        return "[$warning]▲[/]"
    return "[$success]●[/]"


def host_problem(host: HostHealth) -> str | None:
    problems = [gpu_problem(cell) for cell in host.gpus]
    if host.state not in _LINK_OK | _LINK_WAIT | _LINK_ENDED or "error" in problems:
        return "error"
    if host.state in _LINK_WAIT or "warning" in problems:
        return "warning"
    return None


def _max(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def host_line(host: HostHealth, name_width: int) -> Content:
    cells = host.gpus
    online = sum(1 for c in cells if c.online)
    link_style = ("$success" if host.state in _LINK_OK else "$warning"
                  if host.state in _LINK_WAIT else "$text-muted"
                  if host.state in _LINK_ENDED else "$error")
    glyphs = "".join(gpu_glyph(c) for c in cells) or "[$text-muted]-[/]"
    temp = fmt.na(_max([c.temp for c in cells]), "{:.0f}°C")
    power = fmt.na(_sum([c.power for c in cells]), "{:.0f}W")
    mem = fmt.percent(fmt.ratio(_sum([c.mem_used for c in cells]),
                                _sum([c.mem_total for c in cells])))
    disk = fmt.percent(fmt.ratio(host.disk_used, host.disk_total))
    net = f"net ↓{fmt.si(host.net_rx)} ↑{fmt.si(host.net_tx)}"
    # Names and states from the wire go in as text: padded here, not by the template.
    template = (f"$host [{link_style}]$state[/] "
                f"{online}/{len(cells)} {glyphs} {temp} {power} mem {mem} disk {disk} {net}")
    if host.gpu_state not in ("ok", "simulated"):
        template += " [$warning]($gpu_state)[/]"
    return fmt.markup(template, host=fmt.printable(host.host).ljust(name_width),
                      state=fmt.printable(host.state).ljust(10), gpu_state=host.gpu_state)


def grid_markup(hosts: tuple[HostHealth, ...]) -> Content:
    if not hosts:
        return Content.from_markup("[$text-muted]no hosts reported yet[/]")
    rank = {"error": 0, "warning": 1, None: 2}
    ordered = sorted(hosts, key=lambda h: (rank[host_problem(h)], h.host))
    width = min(16, max(len(fmt.printable(h.host)) for h in hosts))
    legend = Content.from_markup(LEGEND + "  (net in B/s)")
    return Content("\n").join([legend, *(host_line(h, width) for h in ordered)])


class GpuGrid(Static):
    hosts: reactive[tuple[HostHealth, ...]] = reactive((), repaint=False)  # update_text does

    def watch_hosts(self, hosts: tuple[HostHealth, ...]) -> None:
        update_text(self, grid_markup(hosts))
