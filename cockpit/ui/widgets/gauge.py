"""A one-line labelled gauge: label, bar, value. Colour says good or bad, and so does
the bar's length, so the reading does not depend on telling colours apart. Which a
reading is, the snapshot says (its level, judged in `cockpit.analysis.efficiency`)."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from cockpit.analysis.efficiency import BAD, GOOD, WARN
from cockpit.ui import format as fmt

LABEL_WIDTH = 10
VALUE_WIDTH = 7
LEVEL_STYLE = {GOOD: "$success", WARN: "$warning", BAD: "$error"}


def level_style(level: str | None) -> str:
    """Theme variable for a reading's level (good, warn or bad); plain text where the
    snapshot gives none."""
    return LEVEL_STYLE.get(level or "", "$text")


class Gauge(Widget):
    """Repainted only when what it shows changes: a reading that moves in a digit the
    gauge does not show (most refreshes) leaves the screen alone."""

    DEFAULT_CSS = """
    Gauge { height: 1; width: 1fr; }
    """

    # The figure (%) and its level, as the snapshot has them: set together (`show`).
    shown: reactive[tuple[float | None, str | None]] = reactive((None, None), repaint=False)

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label

    def show(self, value: float | None, level: str | None) -> None:
        """Show `value` (%) in the colour of its `level` (the snapshot's)."""
        self.shown = (value, level)

    def reading(self, shown: tuple[float | None, str | None]) -> tuple[int, str, str] | None:
        """What the gauge shows for (value, level) at its width: cells filled, colour,
        text."""
        value, level = shown
        if value is None:
            return None
        clamped = min(100.0, max(0.0, value))
        filled = round(self._bar_width() * clamped / 100)
        return filled, level_style(level), fmt.percent(value, 1)

    def _bar_width(self) -> int:
        return max(0, self.size.width - LABEL_WIDTH - VALUE_WIDTH - 3)

    def watch_shown(self, old: tuple[float | None, str | None],
                    new: tuple[float | None, str | None]) -> None:
        if self.reading(old) != self.reading(new):
            self.refresh()

    def render(self) -> Content:
        label = self.label[:LABEL_WIDTH].ljust(LABEL_WIDTH)
        bar_width = self._bar_width()
        shown = self.reading(self.shown)
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
