"""The charts' drawing (`plot_canvas.Figure`): where points, curves, rules and ticks land,
in plain rows of coloured runs (no Textual)."""

from __future__ import annotations

import itertools
import math
import random
import sys

import pytest

from cockpit.ui.widgets.plot_canvas import BRAILLE, Figure, linear_ticks, log_ticks, nice_step

RED, BLUE = (255, 0, 0), (0, 0, 255)


def _text(rows: list[list[tuple[str, object]]]) -> list[str]:
    return ["".join(text for text, _ in runs) for runs in rows]


def _colour_at(rows: list[list[tuple[str, object]]], row: int, col: int) -> object:
    at = 0
    for text, colour in rows[row]:
        if at <= col < at + len(text):
            return colour
        at += len(text)
    raise IndexError(col)


def _plot_area(lines: list[str]) -> tuple[int, int, int, int]:
    """(first row, last row, first column, last column) inside the frame."""
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    left = lines[top].index("┌")
    right = lines[top].index("┐")
    return top + 1, bottom - 1, left + 1, right - 1


def test_every_row_is_the_width_and_runs_of_one_colour_are_merged() -> None:
    figure = Figure()
    figure.plot([0, 5, 10], [1, 3, 2], colour=BLUE)
    figure.scatter([5], [3], colour=RED, marker="◆")
    figure.xticks([0, 5, 10], ["0", "5", "10"])
    figure.xlabel("step")
    rows = figure.rows(40, 12)
    assert len(rows) == 12
    for runs in rows:
        assert sum(len(text) for text, _ in runs) == 40
        assert all(a[1] != b[1] for a, b in itertools.pairwise(runs))


def test_points_land_in_the_cells_of_their_values() -> None:
    figure = Figure()
    figure.scatter([0, 10, 10, 0], [0, 0, 4, 4], colour=RED, marker="o")
    lines = _text(figure.rows(30, 10))
    first, last, left, right = _plot_area(lines)
    # The corners of the data are the corners of the plot.
    for row, col in ((first, left), (first, right), (last, left), (last, right)):
        assert lines[row][col] == "o", (row, col, lines)
    assert sum(line[left:right + 1].count("o") for line in lines) == 4


def test_a_braille_curve_joins_its_points_without_gaps() -> None:
    figure = Figure()
    figure.plot([0, 100], [0, 100], colour=BLUE, marker=BRAILLE)
    rows = figure.rows(24, 10)
    lines = _text(rows)
    first, last, left, right = _plot_area(lines)
    # A diagonal: each plot row holds dots, from bottom left to top right.
    for row in range(first, last + 1):
        cells = [c for c in range(left, right + 1) if lines[row][c] != " "]
        assert cells and all(0x2800 < ord(lines[row][c]) <= 0x28FF for c in cells)
        assert all(_colour_at(rows, row, c) == BLUE for c in cells)
    assert lines[last][left] != " " and lines[first][right] != " "
    assert all(lines[row][left - 1] in "│┤" for row in range(first, last + 1))


def test_a_later_series_is_drawn_over_an_earlier_one() -> None:
    figure = Figure()
    figure.plot([0, 10], [5, 5], colour=BLUE, marker="•")
    figure.scatter([5], [5], colour=RED, marker="★")
    rows = figure.rows(30, 9)
    lines = _text(rows)
    (row,) = [i for i, line in enumerate(lines) if "★" in line]
    col = lines[row].index("★")
    assert _colour_at(rows, row, col) == RED
    assert lines[row].count("•") > 10  # the rest of the line is still there


def test_a_vertical_rule_crosses_every_plot_row_at_its_x() -> None:
    figure = Figure()
    figure.plot([0, 100], [1, 2], colour=BLUE, marker="•")
    figure.vline(50, colour=RED)
    lines = _text(figure.rows(41, 10))
    first, last, left, right = _plot_area(lines)
    cols = {line.index("│", left) for line in lines[first:last + 1]}
    assert len(cols) == 1 and abs(cols.pop() - (left + right) / 2) <= 1


def test_x_ticks_sit_under_their_values_and_crowded_labels_are_left_out() -> None:
    figure = Figure()
    figure.plot([0, 1000], [0, 1], colour=BLUE)
    figure.xticks([0, 250, 500, 750, 1000], ["0", "250", "500", "750", "1000"])
    lines = _text(figure.rows(50, 8))
    _, _, left, right = _plot_area(lines)
    rule = next(i for i, line in enumerate(lines) if "└" in line)
    columns = [i for i, char in enumerate(lines[rule]) if char == "┬"]
    labels = lines[rule + 1].split()
    assert labels == ["0", "250", "500", "750", "1000"]
    for col, label in zip(columns, labels, strict=True):
        assert abs(left + (right - left) * int(label) / 1000 - col) <= 0.5
        assert label in lines[rule + 1][col - len(label): col + len(label)]
    # Too narrow for every label: a tick goes with its label, never one without the other.
    lines = _text(figure.rows(16, 8))
    rule = next(i for i, line in enumerate(lines) if "└" in line)
    assert lines[rule].count("┬") == len(lines[rule + 1].split()) < 5


def test_y_ticks_are_round_values_in_order_up_the_axis() -> None:
    figure = Figure()
    figure.plot([0, 1, 2], [1.853, 2.2, 2.395], colour=BLUE)
    lines = _text(figure.rows(40, 16))
    first, last, left, _ = _plot_area(lines)
    ticked = [(row, float(lines[row][:left - 1])) for row in range(first, last + 1)
              if lines[row][left - 1] == "┤"]
    values = [v for _, v in ticked]
    assert len(values) >= 3 and values == sorted(values, reverse=True)
    steps = {round(a - b, 9) for a, b in itertools.pairwise(values)}
    assert steps == {0.1}
    assert values[-1] >= 1.853 and values[0] <= 2.395


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1.0), (-3.2, 7.9), (1e-4, 3e-4),
                                        (480.0, 530.0), (12_000.0, 97_000.0), (1e6, 4e6)])
def test_linear_ticks_lie_within_the_range_at_most_count(lo: float, hi: float) -> None:
    for count in (2, 3, 6):
        ticks = linear_ticks(lo, hi, count)
        assert 2 <= len(ticks) <= max(2, count)
        assert all(lo - 1e-9 * abs(hi) <= v <= hi + 1e-9 * abs(hi) for v, _ in ticks)
        assert len({label for _, label in ticks}) == len(ticks)  # labels tell them apart


def test_a_log_axis_drops_values_it_has_no_place_for_and_ticks_powers_of_ten() -> None:
    figure = Figure()
    figure.plot([0, 1, 2, 3], [0.0, 0.01, 1.0, 100.0], colour=BLUE, marker="•")
    figure.log_y(True)
    lines = _text(figure.rows(40, 14))
    first, last, left, _ = _plot_area(lines)
    labels = [lines[row][:left - 1].strip() for row in range(first, last + 1)
              if lines[row][left - 1] == "┤"]
    assert labels[0] == "100" and labels[-1] == "0.01" and "1" in labels
    assert log_ticks(0.0, 0.2, 5)  # less than one decade: round values between


def test_empty_single_point_and_cramped_figures_draw_without_failing() -> None:
    empty = Figure()
    empty.title("loss: waiting for data")
    lines = _text(empty.rows(40, 8))
    assert "loss: waiting for data" in lines[0] and "┌" in lines[1]
    one = Figure()
    one.plot([7], [3.0], colour=BLUE)
    one.scatter([7], [3.0], colour=RED, marker="◆")
    assert "◆" in "".join(_text(one.rows(30, 8)))
    rnd = random.Random(3)
    xs = sorted(rnd.uniform(0, 1e5) for _ in range(200))
    ys = [rnd.choice([rnd.uniform(-1, 1), 1e12, -1e-12]) for _ in xs]
    for width in range(0, 12):
        for height in range(0, 7):
            figure = Figure()
            figure.title("t")
            figure.xlabel("x")
            figure.plot(xs, ys, colour=BLUE)
            figure.xticks([0, 5e4], ["0", "50k"])
            rows = figure.rows(width, height)
            assert len(rows) == (height if width > 0 else 0)
            assert all(sum(len(t) for t, _ in runs) == width for runs in rows)


def test_points_that_are_not_finite_are_left_out() -> None:
    figure = Figure()
    figure.plot([0, 1, math.nan, 3, 4], [1, math.inf, 2, -math.inf, 3], colour=BLUE,
                marker="•")
    figure.scatter([math.nan, 2], [1, math.nan], colour=RED, marker="◆")
    figure.vline(math.inf, colour=RED)
    figure.xticks([0, 4], ["0", "4"])
    lines = _text(figure.rows(30, 10))
    assert "◆" not in "".join(lines) and lines[3].count("│") == 2  # the frame's only
    first, last, left, right = _plot_area(lines)
    assert lines[last][left] == "•" and lines[first][right] == "•"


def test_mismatched_points_are_refused() -> None:
    with pytest.raises(ValueError):
        Figure().plot([1, 2], [1], colour=BLUE)
    assert math.isfinite(linear_ticks(0.0, 1.0, 6)[-1][0])


# A recording's losses are stored as they came: any finite float reaches an axis, two of
# them (±1.7e308) a span past the largest float. Every one draws, with labels that read.
EXTREMES = [
    [-1.7e308, 1.7e308],
    [1.7e308, -1.7e308, 0.0, 1.0],
    [-sys.float_info.max, sys.float_info.max],
    [1e308, 1e-308],
    [1e-308, 1e308, -1e308],
    [1.7e308, 1.7e308, 1.7e308],  # all equal, huge
    [-sys.float_info.max] * 2,
    [1e20, 1e20],  # 0.5 each way is nothing beside it
    [5e-324, 1e-323],  # the smallest floats
    [1e-12, 3e-12, 2e-12],
    [1.0, 1.0000000000000002],  # a span of one ulp
    [3.0],  # one value
    [1.7e308],
]


def _y_labels(lines: list[str]) -> list[str]:
    first, last, left, _ = _plot_area(lines)
    return [lines[row][:left - 1].strip() for row in range(first, last + 1)
            if lines[row][left - 1] == "┤"]


@pytest.mark.parametrize("ys", EXTREMES, ids=lambda ys: ",".join(f"{y:g}" for y in ys))
@pytest.mark.parametrize("log_y", [False, True])
@pytest.mark.parametrize("marker", [BRAILLE, "•"])
def test_any_finite_values_draw_with_labels_that_read(ys: list[float], log_y: bool,
                                                      marker: str) -> None:
    figure = Figure()
    figure.vline(len(ys) / 2, colour=RED)
    figure.plot(list(range(len(ys))), ys, colour=BLUE, marker=marker)
    figure.scatter([ys.index(max(ys))], [max(ys)], colour=RED, marker="◆")
    figure.xticks([0, len(ys) - 1], ["0", str(len(ys) - 1)])
    figure.log_y(log_y)
    for width, height in ((60, 16), (30, 8), (12, 5)):
        rows = figure.rows(width, height)
        assert len(rows) == height
        assert all(sum(len(text) for text, _ in runs) == width for runs in rows)
    lines = _text(figure.rows(60, 16))
    labels = _y_labels(lines)
    if log_y and max(ys) <= 0:
        assert labels == []  # nothing has a place on a logarithmic axis
        return
    assert labels and all(len(label) <= 24 for label in labels), labels
    assert len(set(labels)) == len(labels), labels
    values = [float(label.rstrip("kM")) for label in labels]  # numbers, none inf or nan
    assert all(math.isfinite(v) for v in values), labels
    assert values == sorted(values, reverse=True), labels  # in order up the axis
    first, last, left, right = _plot_area(lines)
    plot = "".join(line[left:right + 1] for line in lines[first:last + 1])
    assert "◆" in plot  # the points are drawn inside the frame


def test_a_span_past_the_floats_is_ticked_at_round_values() -> None:
    ticks = linear_ticks(-1.7e308, 1.7e308, 5)
    assert ticks == [(-1e308, "-1e+308"), (0.0, "0"), (1e308, "1e+308")]
    lines = _text(_figure([-1.7e308, 1.7e308]).rows(40, 12))
    assert _y_labels(lines) == ["1e+308", "0", "-1e+308"]
    first, last, left, right = _plot_area(lines)
    # The curve still runs corner to corner.
    assert lines[last][left] != " " and lines[first][right] != " "


def _figure(ys: list[float]) -> Figure:
    figure = Figure()
    figure.plot(list(range(len(ys))), ys, colour=BLUE, marker=BRAILLE)
    return figure


def test_one_huge_value_gets_a_range_around_it_not_an_empty_one() -> None:
    for value in (1.7e308, -sys.float_info.max, 1e20, 5e-324, 3.0):
        lines = _text(_figure([value, value]).rows(40, 12))
        labels = _y_labels(lines)
        assert len(labels) >= 2, (value, lines)
        first, last, _, _ = _plot_area(lines)
        drawn = [row for row in range(first, last + 1) if "⣀" in lines[row]]
        assert drawn, (value, lines)  # the flat line is inside the plot


@pytest.mark.parametrize(("lo", "hi"), [(-1.7e308, 1.7e308), (1e-308, 1e308),
                                        (-sys.float_info.max, sys.float_info.max),
                                        (5e-324, 1e-323), (1.0, 1.0000000000000002),
                                        (1e20, 1e20 + 2e5)])
def test_ticks_are_total_over_finite_ranges(lo: float, hi: float) -> None:
    for count in (2, 3, 6, 10):
        ticks = linear_ticks(lo, hi, count)
        assert 2 <= len(ticks) <= count
        assert all(math.isfinite(v) for v, _ in ticks)
        assert all(0 < len(label) <= 24 for _, label in ticks)
        assert nice_step(lo, hi, count) > 0
    assert linear_ticks(1.0, 1.0, 5) == [] and linear_ticks(0.0, math.inf, 5) == []
    assert log_ticks(math.nan, 1.0, 5) == []
    assert log_ticks(300.0, 308.25, 5) and log_ticks(-1e300, 1e300, 5)


def test_x_limits_and_ticks_past_the_floats_are_ignored_not_fatal() -> None:
    figure = _figure([1.0, 2.0])
    figure.xlim(10**400, 5)  # an integer no float holds
    figure.xticks([0, 10**400, math.nan, 1], ["0", "big", "nan", "1"])
    figure.vline(10**400, colour=RED)
    figure.scatter([10**400, 0], [1.0, 10**400], colour=RED, marker="◆")
    lines = _text(figure.rows(30, 10))
    rule = next(i for i, line in enumerate(lines) if "└" in line)
    assert lines[rule + 1].split() == ["0", "1"]
    figure.xlim(3, 1)  # the wrong way round: the same axis
    figure.vline(1e300, colour=RED)  # far outside: not drawn, not fatal
    assert _text(figure.rows(30, 10))
