"""Health: is it well? The GPU map (hosts × GPUs, links, CPU, memory, disk and network)
and the interruptions.

The pane holds the map's keys: arrows move its cursor over the hosts, Enter opens the
host under it, `/` filters the map by host name or state (Escape clears, then leaves).
They are the pane's so they work as soon as `4` has focused it. In a replay ← and →
seek, on every screen; ↑ and ↓ still move the cursor a line of the map.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.events import Resize
from textual.widgets import Input

from cockpit.analysis.gpu_state import Level, gpus_online
from cockpit.analysis.text import counted
from cockpit.snapshot import Snapshot
from cockpit.ui import format as fmt
from cockpit.ui import keymap
from cockpit.ui.widgets.gpu_map import GpuMap
from cockpit.ui.widgets.interruption_log import InterruptionLog
from cockpit.ui.widgets.pane import Pane
from cockpit.ui.widgets.sim_badge import SimBadge


class MapFilter(Input):
    """Escape clears what was typed; on an empty filter it hands the keys back to the
    pane (the map keeps what the filter shows)."""

    BINDINGS = [Binding("escape", "clear_or_leave", "Clear filter", show=False)]

    def action_clear_or_leave(self) -> None:
        if self.value:
            self.value = ""
            return
        self.display = False
        pane = next((n for n in self.ancestors if isinstance(n, HealthPane)), None)
        if pane is not None:
            pane.focus()


class HealthPane(Pane):
    TITLE = "Health"
    NUMBER = 4
    BINDINGS = [
        *keymap.bindings("map"),
        Binding("up", "move_cursor(0, -1)", "Up", show=False),
        Binding("down", "move_cursor(0, 1)", "Down", show=False),
        Binding("left", "move_cursor(-1, 0)", "Left", show=False),
        Binding("right", "move_cursor(1, 0)", "Right", show=False),
    ]

    def compose_body(self) -> ComposeResult:
        yield SimBadge(id="sim-badge")
        yield MapFilter(placeholder="filter hosts: name or state (xid, offline, hot…); "
                                    "esc: clear", id="map-filter", compact=True)
        with VerticalScroll(id="health-scroll", can_focus=False):
            yield GpuMap(id="gpu-map")
            yield InterruptionLog(id="interruptions")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#map-filter", Input).display = False

    def action_filter_map(self) -> None:
        box = self.query_one("#map-filter", Input)
        box.display = True
        box.focus()

    def action_move_cursor(self, dx: int, dy: int) -> None:
        self.query_one(GpuMap).move(dx, dy)

    def action_open_map_host(self) -> None:
        self.query_one(GpuMap).open_cursor()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "map-filter":
            event.stop()
            self.query_one(GpuMap).filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "map-filter":
            event.stop()
            self.focus()  # the filter stays; the arrows and Enter go to the map again

    def show(self, snapshot: Snapshot) -> None:
        health = snapshot.health
        self.query_one(SimBadge).simulated = health.simulated
        log = self.query_one(InterruptionLog)
        log.interruptions = health.interruptions
        log.advice = health.checkpoint_advice
        log.budget = health.restart_budget
        log.job_state = snapshot.progress.state
        gpu_map = self.query_one(GpuMap)
        gpu_map.keep_under(self._log_lines(log))
        gpu_map.hosts = health.hosts

    def on_resize(self, event: Resize) -> None:
        if self._ready:
            self.query_one(GpuMap).keep_under(self._log_lines(self.query_one(InterruptionLog)))

    def _log_lines(self, log: InterruptionLog) -> int:
        """The log's lines under the map at the scrolling area's width, its margin in."""
        room = self.query_one("#health-scroll").size
        if not room.width:
            return 0
        return log.get_content_height(room, room, room.width) + log.styles.margin.top

    def summary(self, snapshot: Snapshot) -> Content:
        health = snapshot.health
        # The map's view of these hosts (worked out once for both): a host whose state
        # is at the error level is what `host_problem` calls "error", and its GPUs are
        # online as `gpus_online` says from the states the map shows.
        view = self.query_one(GpuMap).view_for(health.hosts)
        bad = sum(1 for row in view.rows if row.state.level is Level.ERROR)
        online = sum(sum(gpus_online(row.host, row.states)) for row in view.rows)
        n = len(health.hosts)
        line = f"{counted(n, 'host')} · GPUs {online}/{view.gpus} online"
        line += f" · [$error]{counted(bad, 'host')} failing[/]" if bad else " · [$success]ok[/]"
        if health.interruptions:
            line += f" · {counted(len(health.interruptions), 'interruption')}"
        if health.simulated:
            line += " · [$warning]SIM[/]"
        return fmt.own_markup(line)  # counts and the cockpit's words only
