"""The main screen: the four instruments, numbered 1-4.

Wide terminals get a 2 × 2 grid. Narrow ones (under 100 columns) stack the panes and
show each as a one-line summary except the focused one, which takes the remaining
height: every instrument stays readable at 80 × 24.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid
from textual.dom import DOMNode
from textual.events import DescendantFocus
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer

from cockpit.snapshot import Snapshot
from cockpit.ui import keymap
from cockpit.ui.screens.host_detail import HostDetailScreen
from cockpit.ui.widgets.effect_pane import EffectPane
from cockpit.ui.widgets.efficiency_pane import EfficiencyPane
from cockpit.ui.widgets.gpu_map import GpuMap
from cockpit.ui.widgets.health_pane import HealthPane
from cockpit.ui.widgets.pane import Pane
from cockpit.ui.widgets.progress_pane import ProgressPane
from cockpit.ui.widgets.status_bar import StatusBar

PANE_IDS = ("progress", "effect", "efficiency", "health")


class MainScreen(Screen):
    BINDINGS = keymap.bindings("main")
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]

    # The screen draws nothing of its own: what changes is passed on to the widgets that
    # show it, and only those repaint (a screen repaint redraws every cell).
    snapshot: reactive[Snapshot | None] = reactive(None, repaint=False)
    label: reactive[str] = reactive("", repaint=False)
    paused: reactive[bool] = reactive(False, repaint=False)
    replaying: reactive[bool] = reactive(False, repaint=False)
    failing: reactive[str] = reactive("", repaint=False)
    unread: reactive[int] = reactive(0, repaint=False)  # warnings and errors not yet read
    # The key that reads them, as the operator's keymap has it (set by the app).
    notices_key: reactive[str] = reactive("", repaint=False)
    _found: tuple[StatusBar | Pane, ...] = ()  # filled on first use once mounted

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status-bar")
        with Grid(id="panes"):
            yield ProgressPane(id="progress", classes="-expanded")
            yield EffectPane(id="effect")
            yield EfficiencyPane(id="efficiency")
            yield HealthPane(id="health")
        yield Footer()

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        for widget in self._receivers():
            widget.snapshot = snapshot

    def _receivers(self) -> tuple[StatusBar | Pane, ...]:
        """The status bar and the four panes, found once: they are composed with the
        screen and never replaced, and a query walks every widget on the screen."""
        if not self._found:
            found = (*self.query(StatusBar), *self.query(Pane))
            if not self.is_mounted:
                return found
            self._found = found
        return self._found

    def on_mount(self) -> None:
        self._update_status()
        self.watch_snapshot(self.snapshot)

    def watch_label(self) -> None:
        self._update_status()

    def watch_paused(self) -> None:
        self._update_status()

    def watch_replaying(self) -> None:
        self._update_status()

    def watch_failing(self) -> None:
        self._update_status()

    def watch_unread(self) -> None:
        self._update_status()

    def _update_status(self) -> None:
        for bar in self.query(StatusBar):
            bar.label = self.label
            bar.paused = self.paused
            bar.replaying = self.replaying
            bar.failing = self.failing
            bar.unread = self.unread
            bar.notices_key = self.notices_key

    def on_descendant_focus(self, event: DescendantFocus) -> None:
        pane = next((n for n in event.widget.ancestors_with_self if isinstance(n, Pane)), None)
        if pane is None:
            return
        for other in self.query(Pane):
            other.set_class(other is pane, "-expanded")

    def on_gpu_map_host_chosen(self, message: GpuMap.HostChosen) -> None:
        """A host opened on the map: its detail screen, over this one."""
        self.app.push_screen(HostDetailScreen(self.snapshot, host=message.host))

    def focused_pane(self) -> Pane | None:
        node: DOMNode | None = self.focused
        while node is not None and not isinstance(node, Pane):
            node = node.parent
        return node

    def action_focus_pane(self, pane_id: str) -> None:
        self.query_one(f"#{pane_id}", Pane).focus()

    def action_toggle_maximise(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        pane = self.focused_pane() or self.query_one("#progress", Pane)
        self.maximize(pane, container=False)

    def action_toggle_timeline(self) -> None:
        """Show or hide the restarts, adjustments and faults on the loss and throughput
        charts together: the two share one axis, and the marks line up across them."""
        effect = self.query_one(EffectPane)
        shown = not effect.timeline
        effect.timeline = shown
        self.query_one(ProgressPane).timeline = shown
        self.notify(f"chart events: {'shown' if shown else 'hidden'}", timeout=2)

    def action_toggle_log_y(self) -> None:
        effect = self.query_one(EffectPane)
        effect.log_y = not effect.log_y
        self.notify(f"loss axis: {'logarithmic' if effect.log_y else 'linear'}", timeout=2)
