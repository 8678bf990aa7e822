"""Screen lines kept until what they were drawn from changes.

For widgets that draw through Textual's line API: Textual calls `render_line` once per
line whenever it repaints the widget, and a chart draws all its lines at once. What
the lines depend on besides the widget's own data is its size and its colours, which
a theme switch changes in two stages (Textual learns the theme's name before its
variables, and restyles the widgets after): all of it is part of the key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from textual.strip import Strip
from textual.widget import Widget


class LineCache:
    def __init__(self) -> None:
        self._lines: list[Strip] = []
        self._drawn_for: tuple[Any, ...] | None = None

    def line(self, widget: Widget, y: int, data: Hashable,
             draw: Callable[[], list[Strip]]) -> Strip:
        """Line `y` of what `draw` draws for `data` at the widget's size and colours,
        drawn again only when one of those changed."""
        app = widget.app
        drawn_for = (data, widget.size, app.theme, app.theme_variables, widget.visual_style)
        if drawn_for != self._drawn_for:
            self._lines = draw()
            self._drawn_for = drawn_for
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(widget.size.width, widget.visual_style.rich_style)

    def forget(self) -> None:
        """Draw again on the next line asked for (the data changed in place)."""
        self._drawn_for = None
