"""Textual's Sparkline, drawn into screen lines directly (Textual's line API).

The throughput and GPU-busy histories change on every refresh that brings data. A
Sparkline is a Rich renderable, which Textual lays out through a Rich console (styled,
split into lines, cropped and padded) at several times the cost of working out the bars.
`SparkBars` takes the data and colours from Textual's own renderable and works the bars
out as it does (`bar_strips`): the same buckets, heights and blended colours, bar by bar,
so the same cells (tests/ui/test_refresh_cost.py and tests/ui/test_spark_bars.py hold
the two to one another). It does so once per bucket rather than once per line, with a
bar's colour made once per shade, and a run of bars in one colour in one segment: the
renderable's Fractions, a Style per bar and a Segment per cell were most of a refresh's
cost of three sparklines.

Textual scales the bars from the data's lowest value to its highest. With no axis beside
the bars, that misleads where the level itself matters: a GPU busy at a steady 95 %
draws the lowest bar everywhere (a flat series), and one moving between 94 and 96 %
swings from the lowest bar to the highest. A `Scale` fixes either end (a percentage's
0 and 100, a rate's 0), and values beyond it are drawn at that end.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from rich.color import Color
from rich.segment import Segment
from rich.style import Style
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.strip import Strip
from textual.widgets import Sparkline

from cockpit.ui.widgets.line_cache import LineCache

BARS = SparklineRenderable.BARS
_LARGEST = sys.float_info.max


class Scale(NamedTuple):
    """The values the lowest and the highest bar stand for; None: the data's own lowest
    or highest, as Textual's Sparkline scales."""

    low: float | None = None
    high: float | None = None


DATA_RANGE = Scale()  # Textual's own
PERCENT = Scale(0.0, 100.0)
FROM_ZERO = Scale(0.0, None)  # a rate: the bars' height is its share of the peak


class SparkBars(Sparkline):
    ALLOW_SELECT = False  # bars are not text to copy

    def __init__(self, data: list[float] | None = None, *, scale: Scale = DATA_RANGE,
                 **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self.scale = scale
        self._lines = LineCache()

    def render_line(self, y: int) -> Strip:
        data = self.data
        return self._lines.line(self, y, None if data is None else tuple(data),
                                self._draw_lines)

    def _draw_lines(self) -> list[Strip]:
        width, height = self.size
        if not (width and height):
            return []
        # Textual annotates render() as a RenderResult; what it returns is its Sparkline
        # renderable, which holds the data and the colours the widget's styles give.
        renderable = cast("SparklineRenderable[float]", self.render())
        low, high = renderable.min_color.color, renderable.max_color.color
        assert low is not None and high is not None  # made from colours (`render`)
        return bar_strips(renderable.data, width, height, low, high,
                          renderable.summary_function, self.visual_style.rich_style,
                          self.scale)


def bar_strips(data: Sequence[float], width: int, height: int, low: Color, high: Color,
               summary: Callable[[Sequence[float]], float], base: Style,
               scale: Scale = DATA_RANGE) -> list[Strip]:
    """The lines Textual's Sparkline renderable draws of `data` in `width` x `height`,
    from `low` (the minimum's colour) to `high` (the maximum's), each bucket summarised
    by `summary`, on `base`; with a `scale` that fixes an end, the bars and colours are
    placed on it instead."""
    shades: dict[Color, Style] = {}

    def shade(colour: Color) -> Style:
        style = shades.get(colour)
        if style is None:
            style = shades[colour] = base + Style.from_color(colour)
        return style

    if not data:
        lines: list[list[tuple[str, Style]]] = [[] for _ in range(height - 1)]
        lines.append([("▁" * width, shade(low))])
    elif len(data) == 1 and scale == DATA_RANGE:
        lines = [[("█" * width, shade(high))] for _ in range(height)]
    else:
        lines = _bars(data, width, height, low, high, summary, shade, base, scale)
    return [Strip([Segment(text, style) for text, style in line]).crop_extend(0, width, base)
            for line in lines[:height]]


def _bars(data: Sequence[float], width: int, height: int, low: Color, high: Color,
          summary: Callable[[Sequence[float]], float], shade: Callable[[Color], Style],
          base: Style, scale: Scale = DATA_RANGE) -> list[list[tuple[str, Style]]]:
    """Each line's runs of bars, top line first, as the renderable picks them: `width`
    buckets of the data (those that are empty left out), the bar at column c from bucket
    `int(c * buckets / width)`, added up in floating point as the renderable adds it."""
    levels = len(BARS)
    top = levels * height - 1
    # The data is a host's: an infinity or ±1.7e308 (whose span is past the floats) is
    # drawn at an end, as Textual would draw it had its arithmetic not overflowed.
    minimum = _within_floats(min(data) if scale.low is None else scale.low)
    maximum = _within_floats(max(data) if scale.high is None else scale.high)
    maximum = max(maximum, minimum)  # a rate from zero that is all below it
    extent = maximum - minimum or 1
    halves = not math.isfinite(extent)  # each taken in halves, which cannot overflow
    if halves:
        minimum, extent = minimum * 0.5, maximum * 0.5 - minimum * 0.5
    n = len(data)
    values = list(data)
    # int(Fraction(n, width) * b) is (n * b) // width: the same bucket bounds.
    summaries = [summary(part) for b in range(width)
                 if (part := values[n * b // width:n * (b + 1) // width])]
    step = len(summaries) / width
    shade_at = _blend(low, high, shade)
    # Each column's bar index and colour, worked out once for all its lines.
    column: list[tuple[int, Style]] = []
    at = 0.0
    for _ in range(width):
        value = summaries[int(at)]
        ratio = ((value * 0.5 if halves else value) - minimum) / extent
        if not 0.0 <= ratio <= 1.0:  # beyond a fixed end: drawn at that end (NaN: the foot)
            ratio = min(max(ratio, 0.0), 1.0) if ratio == ratio else 0.0
        column.append((int(ratio * top), shade_at(ratio)))
        at += step
    lines = []
    for i in reversed(range(height)):
        floor, ceiling = i * levels, (i + 1) * levels
        runs: list[tuple[str, Style]] = []
        for index, colour in column:
            if index < floor:
                char, style = " ", base
            else:
                char, style = "█" if index >= ceiling else BARS[index % levels], colour
            if runs and runs[-1][1] is style:
                runs[-1] = (runs[-1][0] + char, style)
            else:
                runs.append((char, style))
        lines.append(runs)
    return lines


def _within_floats(value: float) -> float:
    """`value`, an infinity as the largest float of its sign (NaN as it is)."""
    return min(max(value, -_LARGEST), _LARGEST) if math.isinf(value) else value


def _blend(low: Color, high: Color, shade: Callable[[Color], Style]
           ) -> Callable[[float], Style]:  # fmt: skip
    """The style of a bar at `ratio` between `low` and `high`: Textual's blend of its
    sparkline's colours (a private helper of `textual.renderables`, not imported), worked
    out in the same arithmetic, with a Color made only for a shade not seen yet (a few
    dozen among a sparkline's columns)."""
    a, b = low.triplet, high.triplet
    if a is None or b is None:  # not both RGB: Textual's blend answers `high`
        style = shade(high)
        return lambda ratio: style
    r1, g1, b1 = a
    dr, dg, db = b[0] - r1, b[1] - g1, b[2] - b1
    made: dict[tuple[int, int, int], Style] = {}

    def colour(ratio: float) -> Style:
        key = (int(r1 + dr * ratio), int(g1 + dg * ratio), int(b1 + db * ratio))
        style = made.get(key)
        if style is None:
            style = made[key] = shade(Color.from_rgb(*key))
        return style

    return colour
