"""Textual's Sparkline, drawn into screen lines directly (Textual's line API).

The throughput and GPU-busy histories change on every refresh that brings data. A
Sparkline is a Rich renderable, which Textual lays out through a Rich console (styled,
split into lines, cropped and padded) at several times the cost of working out the bars.
`SparkBars` takes the bars and their colours from Textual's own renderable and lays
them out itself, as that path would: the same cells, for a fraction of the time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from rich.console import ConsoleRenderable
from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import Sparkline

from cockpit.ui.widgets.line_cache import LineCache


class SparkBars(Sparkline):
    ALLOW_SELECT = False  # bars are not text to copy

    def __init__(self, data: list[float] | None = None, **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self._lines = LineCache()

    def render_line(self, y: int) -> Strip:
        data = self.data
        return self._lines.line(self, y, None if data is None else tuple(data),
                                self._draw_lines)

    def _draw_lines(self) -> list[Strip]:
        width, height = self.size
        if not (width and height):
            return []
        base = self.visual_style.rich_style
        console = self.app.console
        # Textual annotates render() as a RenderResult; what it returns is its Sparkline
        # renderable, which yields Segments.
        renderable = cast("ConsoleRenderable", self.render())
        bars = cast("Iterable[Segment]", renderable.__rich_console__(
            console, console.options.update(width=width, height=height, highlight=False)))
        lines: list[list[Segment]] = [[]]
        for segment in bars:
            if segment.text == "\n":
                lines.append([])
            elif segment.text:
                style = segment.style
                lines[-1].append(Segment(segment.text, base if style is None else base + style))
        return [Strip(line).crop_extend(0, width, base) for line in lines[:height]]
