"""SIM badge: simulated GPU data must never be mistaken for a real cluster."""

from __future__ import annotations

from textual.reactive import reactive
from textual.widgets import Static


class SimBadge(Static):
    DEFAULT_CSS = """
    SimBadge { width: auto; padding: 0 1; text-style: bold;
               background: $warning; color: $background; }
    """

    simulated: reactive[bool] = reactive(False, repaint=False)  # only shows or hides it

    def __init__(self, id: str | None = None) -> None:
        super().__init__("SIM: simulated GPUs", id=id)

    def watch_simulated(self, simulated: bool) -> None:
        self.display = simulated
