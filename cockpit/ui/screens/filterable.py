"""A drill-down with a `/` filter: the operator types, the list narrows as they type."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input

from cockpit.ui import keymap
from cockpit.ui.screens.drill_down import DrillDownScreen


def matches(text: str, query: str) -> bool:
    """Every whitespace-separated word of the query appears in the text (any case)."""
    lowered = text.lower()
    return all(word in lowered for word in query.lower().split())


class FilterInput(Input):
    """Escape clears what was typed; on an empty filter it leaves the screen, as on the
    rest of it (a reader who typed a filter wanted the list, not to be sent back)."""

    BINDINGS = [Binding("escape", "clear_or_back", "Clear filter", show=False)]

    def action_clear_or_back(self) -> None:
        if self.value:
            self.value = ""
        else:
            self.app.pop_screen()


class FilterableScreen(DrillDownScreen):
    BINDINGS = [*DrillDownScreen.BINDINGS, *keymap.bindings("filter")]

    def details_params(self) -> dict[str, object]:
        # The log and the events of the job shown: a fork's lines are not its parent's.
        return self.job_params()

    @property
    def query_text(self) -> str:
        return self.query_one("#filter", Input).value

    def filter_input(self) -> Input:
        return FilterInput(placeholder="filter: words that must all appear (esc: clear, "
                                       "then back)", id="filter")

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.apply_filter()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.focus_next()

    def apply_filter(self) -> None:
        """Redraw the list with the current filter."""
