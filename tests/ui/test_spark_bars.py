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

from cockpit.ui.widgets.spark_bars import DATA_RANGE, FROM_ZERO, PERCENT, Scale, bar_strips

LOW, HIGH = Color.parse("#1e3a5f"), Color.parse("#f0c040")
BASE = Style(color="#cccccc", bgcolor="#101010")


def textual_lines(data: Sequence[float], width: int, height: int,
                  summary: Callable[[Sequence[float]], float] = max,
                  low: Color = LOW, high: Color = HIGH) -> list[Strip]:
    """What the renderable yields, split into lines and laid on `BASE` as the widget
    did before `bar_strips`."""
    renderable = SparklineRenderable(data, width=width, height=height, min_color=low,
                                     max_color=high, summary_function=summary)
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


def test_colours_of_a_terminal_palette_are_drawn_as_textual_draws_them() -> None:
    """A theme may name a terminal's own colour ("red"), which has no RGB to blend:
    Textual then draws every bar in the high colour, and so do the bars here."""
    data = [float((i * 37) % 23) for i in range(40)]
    for low, high in ((Color.parse("red"), HIGH), (LOW, Color.parse("green"))):
        got = bar_strips(data, 40, 2, low, high, max, BASE)
        assert cells(got) == cells(textual_lines(data, 40, 2, max, low, high))


def test_a_run_of_one_colour_is_one_segment() -> None:
    """Where the renderable yields a segment per cell, the bars of one shade side by
    side are one: fewer segments for the screen to lay out, the same cells."""
    (line,) = fast([1.0] * 30 + [9.0] * 30, 60, 1)
    assert len(list(line)) == 2


def bars(data: Sequence[float], width: int, scale: Scale) -> str:
    assert LOW.triplet is not None and HIGH.triplet is not None
    (line,) = bar_strips(data, width, 1, LOW, HIGH, max, BASE, scale)
    return line.text


def test_a_steady_level_is_drawn_at_its_height_on_a_fixed_scale() -> None:
    """Textual's scale draws any flat series as the lowest bar and a 94-96 % wobble
    from the lowest bar to the highest; on 0-100 both read as the level they are."""
    assert bars([95.5] * 20, 20, DATA_RANGE) == "▁" * 20
    assert bars([95.5] * 20, 20, PERCENT) == "▇" * 20  # int(0.955 * 7): the 7th of 8
    assert bars([0.0] * 20, 20, PERCENT) == "▁" * 20
    assert bars([100.0] * 20, 20, PERCENT) == "█" * 20
    assert set(bars([94.0, 96.0] * 10, 20, DATA_RANGE)) == {"▁", "█"}
    assert set(bars([94.0, 96.0] * 10, 20, PERCENT)) == {"▇"}
    assert bars([50.0], 4, PERCENT) == "▄" * 4  # one point at its height, not full
    assert bars([40.0, 80.0], 2, FROM_ZERO) == "▄█"  # a rate: its share of the peak


def test_values_beyond_a_fixed_end_are_drawn_at_that_end() -> None:
    assert bars([-5.0, 150.0], 2, PERCENT) == "▁█"
    assert bars([-3.0, -1.0], 2, FROM_ZERO) == "▁▁"  # nothing above zero: all lowest


def test_the_colours_follow_the_fixed_scale() -> None:
    """The colour runs from the low end's to the high end's over the scale, as the bar's
    height does: a steady 95 % is near the high colour, not the low one."""
    assert LOW.triplet is not None and HIGH.triplet is not None
    (line,) = bar_strips([95.0] * 5, 5, 1, LOW, HIGH, max, BASE, PERCENT)
    (segment,) = list(line)
    assert segment.style is not None and segment.style.color is not None
    near = segment.style.color.triplet
    assert near is not None
    assert all(abs(c - h) < abs(c - lo)
               for c, h, lo in zip(near, HIGH.triplet, LOW.triplet, strict=True))


def test_values_at_the_ends_of_the_floats_draw_at_the_ends() -> None:
    """A host's figures: ±1.7e308 (a span past the largest float), an infinity, NaN. The
    bars are drawn, extremes at the top or the foot, rather than a ValueError."""
    huge, inf, nan = 1.7e308, float("inf"), float("nan")
    for data in ([-huge, huge], [huge, -huge, 0.0], [inf, 1.0], [-inf, inf], [nan, 1.0],
                 [1.0, nan, 2.0], [huge] * 3, [inf]):
        for scale in (DATA_RANGE, FROM_ZERO, PERCENT, Scale(-huge, huge)):
            for summary in (max, lambda part: sum(part) / len(part)):
                strips = bar_strips(data, 6, 2, LOW, HIGH, summary, BASE, scale)
                assert len(strips) == 2 and all(s.cell_length == 6 for s in strips)
    foot, top = [cells(fast([-huge, huge], 2, 1))[0][i][0] for i in (0, 1)]
    assert (foot, top) == ("▁", "█")
    assert [c for c, _ in cells(fast([-huge, 0.0, huge], 3, 2))[0]] == [" ", " ", "█"]
