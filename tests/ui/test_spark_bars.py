"""`bar_strips` against Textual's Sparkline renderable laid out through a Rich console,
the path it stands in for: the same cells for any data and room (buckets that divide
unevenly, more columns than points, a flat series, one point, none)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.color import Color
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.strip import Strip

from cockpit.ui.widgets.spark_bars import bar_strips

LOW, HIGH = Color.parse("#1e3a5f"), Color.parse("#f0c040")
BASE = Style(color="#cccccc", bgcolor="#101010")


def textual_lines(data: Sequence[float], width: int, height: int,
                  summary: Callable[[Sequence[float]], float] = max) -> list[Strip]:
    """What the renderable yields, split into lines and laid on `BASE` as the widget
    did before `bar_strips`."""
    renderable = SparklineRenderable(data, width=width, height=height, min_color=LOW,
                                     max_color=HIGH, summary_function=summary)
    console = Console(width=width, height=height, color_system="truecolor")
    lines: list[list[Segment]] = [[]]
    for segment in renderable.__rich_console__(
            console, console.options.update(width=width, height=height, highlight=False)):
        if segment.text == "\n":
            lines.append([])
        elif segment.text:
            style = segment.style
            lines[-1].append(Segment(segment.text, BASE if style is None else BASE + style))
    return [Strip(line).crop_extend(0, width, BASE) for line in lines[:height]]


def cells(strips: list[Strip]) -> list[list[tuple[str, Style | None]]]:
    return [[(char, segment.style) for segment in strip for char in segment.text]
            for strip in strips]


def fast(data: Sequence[float], width: int, height: int,
         summary: Callable[[Sequence[float]], float] = max) -> list[Strip]:
    assert LOW.triplet is not None and HIGH.triplet is not None
    return bar_strips(data, width, height, LOW, HIGH, summary, BASE)


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), max_size=300),
       width=st.integers(min_value=1, max_value=120), height=st.integers(min_value=1, max_value=4))
def test_the_same_cells_as_textuals_sparkline(data: list[float], width: int,
                                              height: int) -> None:
    assert cells(fast(data, width, height)) == cells(textual_lines(data, width, height))


def test_the_cases_the_renderable_draws_apart() -> None:
    history = [float((i * 37) % 23) for i in range(90)]
    for data in ([], [4.0], [4.0, 4.0, 4.0], [1.0, 5.0], history, history[:7]):
        for width, height in ((1, 1), (7, 1), (40, 1), (89, 2), (91, 3), (200, 2)):
            for summary in (max, min):
                got = fast(data, width, height, summary)
                assert cells(got) == cells(textual_lines(data, width, height, summary))
                assert len(got) == height and all(s.cell_length == width for s in got)


def test_a_run_of_one_colour_is_one_segment() -> None:
    """Where the renderable yields a segment per cell, the bars of one shade side by
    side are one: fewer segments for the screen to lay out, the same cells."""
    (line,) = fast([1.0] * 30 + [9.0] * 30, 60, 1)
    assert len(list(line)) == 2
