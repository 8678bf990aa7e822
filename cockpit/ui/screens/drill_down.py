"""Common ground of the drill-down screens: a title, a Back key, and details that are
re-fetched as new snapshots arrive (at most every few seconds: drill-down queries can
be heavier than a snapshot)."""

from __future__ import annotations

import time
from typing import ClassVar

from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer

from cockpit.read.details import DetailKind
from cockpit.snapshot import Snapshot
from cockpit.ui.messages import DetailsRequested

DETAILS_REFRESH_S = 2.0


class DrillDownScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="back")]
    WHAT: ClassVar[DetailKind | None] = None  # the `source.details` kind shown, if any

    # Shown through the screen's widgets, which repaint themselves when they change.
    snapshot: reactive[Snapshot | None] = reactive(None, repaint=False)
    details: reactive[object] = reactive(None, always_update=True, repaint=False)

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        super().__init__()
        self.set_reactive(DrillDownScreen.snapshot, snapshot)
        self._last_request: float | None = None
        self._ready = False  # composed and mounted: safe to query
        self._trailing: Timer | None = None  # a details request waiting for its turn
        self._jump: tuple[float, float] | None = None  # (from, to) of a seek under way

    def details_params(self) -> dict[str, object]:
        return {}

    def job_params(self) -> dict[str, object]:
        """The job the panes show (a fork beside its parent: the fork), for details that
        belong to one job (its log, its events, its run): never a second guess."""
        job = self.snapshot.job if self.snapshot is not None else None
        return {"job": job} if job else {}

    def request_details(self) -> None:
        if not self.WHAT:
            return
        self._last_request = time.monotonic()
        self.post_message(DetailsRequested(self.WHAT, self.details_params()))

    def on_mount(self) -> None:
        self._ready = True
        if self.snapshot is not None:
            self.show_snapshot(self.snapshot)
        self.request_details()

    def expect_jump(self, target: float) -> None:
        """The replay cursor is being moved to `target`: the first snapshot nearer it
        than to the one shown gets its details at once, not at the next turn (a seek is
        the operator asking to see another moment)."""
        if self.snapshot is not None and target != self.snapshot.ts:
            self._jump = (self.snapshot.ts, target)

    def _landed(self, snapshot: Snapshot) -> bool:
        if self._jump is None:
            return False
        origin, target = self._jump
        if abs(snapshot.ts - target) >= abs(snapshot.ts - origin):
            return False
        self._jump = None
        return True

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None or not self._ready:
            return
        self.show_snapshot(snapshot)
        if self._landed(snapshot):
            if self._trailing is not None:
                self._trailing.stop()
                self._trailing = None
            self.request_details()
            return
        if self._trailing is not None:
            return  # a request is already due for this snapshot
        wait = 0.0 if self._last_request is None else (
            self._last_request + DETAILS_REFRESH_S - time.monotonic())
        if wait <= 0:
            self.request_details()
        else:
            # The newest snapshot must reach the details too, even when none follows it
            # (a paused replay after a seek): ask once the interval has passed.
            self._trailing = self.set_timer(wait, self._trailing_request)

    def _trailing_request(self) -> None:
        self._trailing = None
        self.request_details()

    def accepts(self, what: DetailKind, params: dict[str, object]) -> bool:
        """Whether a details result is the one this screen currently wants."""
        return what == self.WHAT and params == self.details_params()

    def show_snapshot(self, snapshot: Snapshot) -> None:
        """Update what this screen shows straight from the snapshot."""
