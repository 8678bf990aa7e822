"""What run this is: config, seed, data version, environment, git commit, tags."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer, Static

from cockpit.ui.screens.drill_down import DrillDownScreen
from cockpit.ui.widgets.detail_view import DetailView


class RunInfoScreen(DrillDownScreen):
    WHAT = "run"

    def details_params(self) -> dict[str, object]:
        # The job the panes show (a fork beside its parent: the fork), not a second guess.
        job = self.snapshot.job if self.snapshot is not None else None
        return {"job": job} if job else {}

    def compose(self) -> ComposeResult:
        yield Static("[b]Run info[/b]", id="screen-title")
        yield DetailView(id="run-details")
        yield Footer()

    def watch_details(self, details: object) -> None:
        if self._ready:
            self.query_one(DetailView).data = details
