"""A one-line labelled gauge: label, bar, value. Colour says good or bad, and so does
the bar's length, so the reading does not depend on telling colours apart."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from cockpit.ui import format as fmt

LABEL_WIDTH = 10
VALUE_WIDTH = 7


def level_style(value: float, good: float, bad: float) -> str:
    """Theme variable for a reading: `good` and `bad` are thresholds, and whichever is
    larger says which direction is better (busy: high is good; data wait: low is)."""
    if good >= bad:
        if value >= good:
            return "$success"
        return "$error" if value <= bad else "$warning"
    if value <= good:
        return "$success"
    return "$error" if value >= bad else "$warning"


class Gauge(Widget):
    """Repainted only when what it shows changes: a reading that moves in a digit the
    gauge does not show (most refreshes) leaves the screen alone."""

    DEFAULT_CSS = """
    Gauge { height: 1; width: 1fr; }
    """

    value: reactive[float | None] = reactive(None, repaint=False)

    def __init__(self, label: str, *, good: float, bad: float, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label
        self.good = good
        self.bad = bad

    def reading(self, value: float | None) -> tuple[int, str, str] | None:
        """What the gauge shows for `value` at its width: cells filled, colour, text."""
        if value is None:
            return None
        clamped = min(100.0, max(0.0, value))
        filled = round(self._bar_width() * clamped / 100)
        return filled, level_style(clamped, self.good, self.bad), fmt.percent(value, 1)

    def _bar_width(self) -> int:
        return max(0, self.size.width - LABEL_WIDTH - VALUE_WIDTH - 3)

    def watch_value(self, old: float | None, new: float | None) -> None:
        if self.reading(old) != self.reading(new):
            self.refresh()

    def render(self) -> Content:
        label = self.label[:LABEL_WIDTH].ljust(LABEL_WIDTH)
        bar_width = self._bar_width()
        shown = self.reading(self.value)
        if shown is None:
            empty = "░" * bar_width
            return fmt.own_markup(
                f"{label} [$text-muted]▕{empty}▏ {fmt.NA_TEXT:>{VALUE_WIDTH - 1}}[/]"
            )
        filled, style, text = shown
        return fmt.own_markup(
            f"{label} ▕[{style}]{'█' * filled}[/][$text-muted]{'░' * (bar_width - filled)}[/]▏"
            f" [{style}]{text:>{VALUE_WIDTH - 1}}[/]"
        )
