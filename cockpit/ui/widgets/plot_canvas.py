"""A line and point chart drawn into terminal cells: a frame with tick labels, curves at
braille resolution (2 x 4 dots a cell) or as one glyph a cell, single-glyph points and
vertical rules, each in its own colour.

Why not a plotting library: the main screen redraws its loss and throughput charts on
every refresh that brings steps (each second while a job trains). plotext, which drew
them, took 3 to 5 ms per chart in list passes over every dot and every cell, a sixth of
a fleet refresh's budget (`bench/ui_fleet.py`). A chart here is a few hundred points:
each series is one pass over its points (Bresenham between neighbours), the cells one
pass per row. What is drawn is what plotext drew for these charts, in the same layout
(the frame, `┤` at a y tick, `┬` at an x tick with its label under it), with y ticks at
round values rather than at equal fractions of the range.

Pure Python, without Textual: `Figure.rows` gives each screen row as runs of cells of
one colour, an (r, g, b) tuple or None for the chart's text colour; the widget turns
them into screen lines (`cockpit.ui.widgets.loss_chart.ChartWidget`).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

Colour = tuple[int, int, int] | None
Run = tuple[str, Colour]

BRAILLE = "braille"  # a curve's marker: dots at 2 x 4 per cell
# The dot of a braille cell at (column, row) within the cell, row 0 at its top.
_DOT = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
_NICE = (1.0, 2.0, 2.5, 5.0, 10.0)
# The values are a recording's or a host's: any finite float reaches an axis, 1.7e308 and
# -1.7e308 on one, whose span (hi - lo) is past the largest float. Nothing here works out
# a span that overflows (`_fraction`, `_nice`), and a power of ten stays within these
# exponents (10.0 ** 309 raises; below -323 there is no step to count in).
_LARGEST = sys.float_info.max
_POWER_MIN, _POWER_MAX = -323, 308
_LOG_MIN, _LOG_MAX = math.log10(5e-324), math.log10(_LARGEST)  # the positive floats'
_OUTSIDE = 8.0  # a position beyond the plot is followed this many plot sizes, no further
_LABEL_MAX = 10  # a plain label longer than this may be written as 1.5e+308 instead
_SIGNIFICANT_MAX = 16  # digits after the point of such a label, at most


@dataclass(frozen=True)
class _Series:
    kind: str  # "line", "points" or "vline"
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    colour: Colour
    marker: str


def _segment(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """The grid points from (x0, y0) to (x1, y1) inclusive (Bresenham)."""
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x1 >= x0 else -1), (1 if y1 >= y0 else -1)
    err = dx + dy
    out = []
    while True:
        out.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return out
        twice = 2 * err
        if twice >= dy:
            err += dy
            x0 += sx
        if twice <= dx:
            err += dx
            y0 += sy


def _finite(value: float) -> float | None:
    """`value` as a float, None where it is NaN, infinite or an integer past the floats."""
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fraction(value: float, lo: float, hi: float) -> float:
    """Where `value` lies across [lo, hi] (finite, lo < hi): 0 at lo, 1 at hi, kept within
    `_OUTSIDE` spans beyond either end. A span past the largest float is taken in halves,
    so neither it nor the result overflows (nor is NaN)."""
    span = hi - lo
    if math.isfinite(span):
        at = (value - lo) / span  # an infinity where far out: kept within below
    else:
        at = (value * 0.5 - lo * 0.5) / (hi * 0.5 - lo * 0.5)
    return min(max(at, -_OUTSIDE), 1.0 + _OUTSIDE)


def _log_span(lo: float, hi: float) -> float:
    """log10(hi - lo) for finite lo < hi, also where hi - lo is past the largest float."""
    span = hi - lo
    if math.isfinite(span):
        return math.log10(span)
    return math.log10(hi * 0.5 - lo * 0.5) + math.log10(2.0)


def _multiples(lo: float, hi: float, step: float) -> tuple[int, int] | None:
    """The first and the last k with k * step in [lo, hi] (to rounding), or None where
    they cannot be counted (a step so fine that lo / step overflows)."""
    low, high = lo / step, hi / step
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return math.ceil(low - 1e-9), math.floor(high + 1e-9)


def _nice(lo: float, hi: float, count: int) -> tuple[float, int]:
    """The finest step m x 10**e (m of 1, 2, 2.5, 5 and 10) whose multiples in [lo, hi]
    (finite, lo < hi) number at most `count` (at least 2), as (m, e); where none can be
    had in floats, the power of ten nearest the span's count-th."""
    target = _log_span(lo, hi) - math.log10(max(1, count - 1))
    first = math.floor(target)
    for power in (first - 1, first, first + 1):
        if not _POWER_MIN <= power <= _POWER_MAX:
            continue
        for m in _NICE:
            step = m * 10.0 ** power
            if not 0.0 < step < math.inf:  # 2 x 10**308 is past the floats
                continue
            ks = _multiples(lo, hi, step)
            if ks is not None and ks[1] - ks[0] + 1 <= count:
                return m, power
    return 1.0, min(max(first, _POWER_MIN), _POWER_MAX)


def nice_step(lo: float, hi: float, count: int) -> float:
    """The finest of 1, 2, 2.5 and 5 times a power of ten whose multiples in [lo, hi]
    (finite, lo < hi) number at most `count` (at least 2)."""
    m, power = _nice(lo, hi, count)
    return m * 10.0 ** power


def _plain(text: str) -> str:
    return "0" if float(text) == 0 else text  # not "-0.00"


def _labels(values: Sequence[float], m: float, power: int, top: float) -> list[str]:
    """The labels of `values`, ticks m x 10**power apart on an axis reaching `top` (> 0)
    either way: in one unit for the axis ("12.5k", "1.2M" past ten thousand), with the
    decimals the step needs; written as 1.5e+308 where that is shorter than a long
    plain label (values past a million million, steps finer than a millionth)."""
    if m == 10.0:
        m, power = 1.0, power + 1
    quarter = 1 if m == 2.5 else 0  # 2.5 x 10**k has one digit more
    shift, suffix = (0, "") if top < 1e4 else (3, "k") if top < 1e6 else (6, "M")
    decimals = max(0, shift - power + quarter)
    plain: list[str] | None = None
    if decimals <= 3 * _LABEL_MAX and top < 10.0 ** (3 * _LABEL_MAX):
        scale = 10.0 ** shift
        plain = [_plain(f"{v / scale:.{decimals}f}") + suffix for v in values]
        if max(map(len, plain)) <= _LABEL_MAX:
            return plain
    digits = min(_SIGNIFICANT_MAX, max(0, math.floor(math.log10(top)) - power + quarter))
    exponent = [_plain(f"{v:.{digits}e}") for v in values]
    if plain is not None and max(map(len, plain)) <= max(map(len, exponent)):
        return plain
    return exponent


def linear_ticks(lo: float, hi: float, count: int) -> list[tuple[float, str]]:
    """About `count` round values across [lo, hi] (lo < hi) with their labels, in one
    unit for the axis ("12.5k", "1.2M" past ten thousand, "1e+308" far past). Any finite
    lo and hi (none where not both finite and lo < hi)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        return []
    count = max(2, count)
    m, power = _nice(lo, hi, count)
    step = m * 10.0 ** power
    ks = _multiples(lo, hi, step) if 0.0 < step < math.inf else None
    values: list[float] = []
    if ks is not None and 2 <= ks[1] - ks[0] + 1 <= count:
        values = [v for k in range(ks[0], ks[1] + 1) if math.isfinite(v := k * step)]
    if len(values) < 2:
        values = [lo, hi]
        m, power = _nice(lo, hi, 10)
    return list(zip(values, _labels(values, m, power, max(abs(lo), abs(hi))), strict=True))


def _power_label(m: float, power: int) -> str:
    """m x 10**power as `%g` writes it ("200", "0.05", "1e+308"), without working out a
    value past the floats."""
    return f"{m * 10.0 ** power:g}" if -4 <= power <= 5 else f"{m:g}e{power:+03d}"


def _power(exponent: float) -> float:
    """10 ** exponent, the largest float where that is past the floats (0 below them)."""
    try:
        return 10.0 ** exponent
    except OverflowError:
        return _LARGEST


def log_ticks(lo: float, hi: float, count: int) -> list[tuple[float, str]]:
    """Round values across [10**lo, 10**hi] as (log10 of the value, label): 1, 2 and 5
    times the powers of ten, or the powers alone where those are too many. Any finite
    lo < hi: the powers looked at are those of the floats."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        return []
    first = max(math.floor(lo), _POWER_MIN - 2) - 1
    last = min(math.ceil(hi), _POWER_MAX + 2) + 1
    for multiples in ((1.0, 2.0, 5.0), (1.0,)):
        values = [(math.log10(m) + k, _power_label(m, k))
                  for k in range(first, last) for m in multiples
                  if lo - 1e-9 <= math.log10(m) + k <= hi + 1e-9]
        if len(values) <= count:
            break
    if len(values) > count:
        values = values[:: math.ceil(len(values) / count)]
    if len(values) < 2:  # within a decade: round values of the values themselves
        return [(math.log10(v), label)
                for v, label in linear_ticks(_power(lo), _power(hi), count) if v > 0]
    return values


class Figure:
    """One chart's content, drawn at a size by `rows`. Series are drawn in the order
    they were added, a later one over an earlier one where they share a cell."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._series: list[_Series] = []
        self._title = ""
        self._xlabel = ""
        self._xticks: list[tuple[float, str]] = []
        self._xlim: tuple[float, float] | None = None
        self._log_y = False

    def title(self, text: str) -> None:
        self._title = text

    def xlabel(self, text: str) -> None:
        self._xlabel = text

    def xticks(self, positions: Sequence[float], labels: Sequence[str]) -> None:
        """A tick at each position (one not finite is left out) with its label under it."""
        ticks = list(zip(positions, labels, strict=True))
        self._xticks = [(at, label) for position, label in ticks
                        if (at := _finite(position)) is not None]

    def xlim(self, lo: float, hi: float) -> None:
        """The x axis from lo to hi (either way round); ignored where either is not finite."""
        low, high = _finite(lo), _finite(hi)
        self._xlim = None if low is None or high is None else (min(low, high), max(low, high))

    def log_y(self, on: bool) -> None:
        self._log_y = on

    def plot(self, xs: Sequence[float], ys: Sequence[float], *, colour: Colour,
             marker: str = BRAILLE) -> None:
        """A curve through the points in order: braille dots, or `marker` in each cell."""
        self._add("line", xs, ys, colour, marker)

    def scatter(self, xs: Sequence[float], ys: Sequence[float], *, colour: Colour,
                marker: str) -> None:
        self._add("points", xs, ys, colour, marker)

    def vline(self, x: float, *, colour: Colour, marker: str = "│") -> None:
        at = _finite(x)
        if at is not None:
            self._series.append(_Series("vline", (at,), (), colour, marker))

    def _add(self, kind: str, xs: Sequence[float], ys: Sequence[float], colour: Colour,
             marker: str) -> None:
        if len(xs) != len(ys):
            raise ValueError(f"{len(xs)} x values for {len(ys)} y values")
        # NaN and the infinities have no place on an axis (and the values are a
        # recording's): such a point is left out, not drawn somewhere or fatal.
        pairs = ((_finite(x), _finite(y)) for x, y in zip(xs, ys, strict=True))
        kept = [(x, y) for x, y in pairs if x is not None and y is not None]
        self._series.append(_Series(kind, tuple(x for x, _ in kept),
                                    tuple(y for _, y in kept), colour, marker))

    def rows(self, width: int, height: int) -> list[list[Run]]:
        """The chart at `width` x `height` cells: each row as runs of one colour."""
        if width <= 0 or height <= 0:
            return []
        layout = _Layout(self, width, height)
        return [_runs(chars, colours) for chars, colours in layout.draw()]


def _runs(chars: list[str], colours: list[Colour]) -> list[Run]:
    runs: list[Run] = []
    start = 0
    for i in range(1, len(chars) + 1):
        if i == len(chars) or colours[i] != colours[start]:
            runs.append(("".join(chars[start:i]), colours[start]))
            start = i
    return runs


class _Layout:
    """Where everything goes at one size (made for one `rows` call)."""

    def __init__(self, figure: Figure, width: int, height: int) -> None:
        self.f = figure
        self.width, self.height = width, height
        # On a logarithmic axis y is drawn as its log10, and a value <= 0 has no place.
        self.series = [_on_log_axis(s) for s in figure._series] if figure._log_y \
            else figure._series
        points = [s for s in self.series if s.kind != "vline"]
        self.top = 1 if figure._title else 0
        below = 1 + (1 if figure._xticks else 0) + (1 if figure._xlabel else 0)
        self.plot_h = height - self.top - 1 - below  # between the frame's two rules
        ys = [y for s in points for y in s.ys]
        self.y_range = _span(min(ys), max(ys), 0.5) if ys else None
        if self.y_range is not None and figure._log_y:
            # Not past the floats' decades, where a tick would be at 5e+308.
            lo, hi = self.y_range
            self.y_range = _span(max(lo, _LOG_MIN), min(hi, _LOG_MAX), 0.5)
        xs = [x for s in self.series for x in s.xs]
        x_range = figure._xlim or ((min(xs), max(xs)) if xs else None)
        self.x_range = _span(*x_range, 1.0) if x_range else None
        self.y_ticks: list[tuple[int, str]] = []
        if self.y_range is not None and self.plot_h > 0:
            count = max(2, (self.plot_h + 1) // 2)
            ticks = (log_ticks if figure._log_y else linear_ticks)(*self.y_range, count)
            seen: set[int] = set()
            for value, label in ticks:
                row = self._row(value)
                if 0 <= row < self.plot_h and row not in seen:
                    seen.add(row)
                    self.y_ticks.append((row, label))
        self.label_w = max((len(label) for _, label in self.y_ticks), default=0)
        self.plot_w = width - self.label_w - 2

    def _row(self, y: float) -> int:
        """The plot row (0 at the top) of a y value (log10 of it on a log axis); one far
        beyond the plot is a few plot heights beyond it."""
        assert self.y_range is not None
        return self.plot_h - 1 - round(_fraction(y, *self.y_range) * (self.plot_h - 1))

    def _col(self, x: float) -> int:
        assert self.x_range is not None
        return round(_fraction(x, *self.x_range) * (self.plot_w - 1))

    def draw(self) -> list[tuple[list[str], list[Colour]]]:
        width = self.width
        lines: list[tuple[list[str], list[Colour]]] = [
            ([" "] * width, [None] * width) for _ in range(self.height)]
        if self.f._title:
            _put_centred(lines[0][0], self.f._title, 0, width)
        if self.plot_h < 1 or self.plot_w < 2:
            return lines
        grid = [[" "] * self.plot_w for _ in range(self.plot_h)]
        tint: list[list[Colour]] = [[None] * self.plot_w for _ in range(self.plot_h)]
        if self.x_range is not None and self.y_range is not None:
            for series in self.series:
                self._series(series, grid, tint)
        left = self.label_w
        top = lines[self.top][0]
        top[left] = "┌"
        top[left + 1: left + 1 + self.plot_w] = "─" * self.plot_w
        top[left + 1 + self.plot_w] = "┐"
        labels = dict(self.y_ticks)
        for row in range(self.plot_h):
            chars, colours = lines[self.top + 1 + row]
            label = labels.get(row, "")
            chars[left - len(label): left] = label
            chars[left] = "┤" if label else "│"
            chars[left + 1: left + 1 + self.plot_w] = grid[row]
            colours[left + 1: left + 1 + self.plot_w] = tint[row]
            chars[left + 1 + self.plot_w] = "│"
        bottom_at = self.top + 1 + self.plot_h
        bottom = lines[bottom_at][0]
        bottom[left] = "└"
        bottom[left + 1: left + 1 + self.plot_w] = "─" * self.plot_w
        bottom[left + 1 + self.plot_w] = "┘"
        if self.f._xticks:
            self._x_ticks(bottom, lines[bottom_at + 1][0])
        if self.f._xlabel:
            _put_centred(lines[-1][0], self.f._xlabel, left + 1, left + 1 + self.plot_w)
        return lines

    def _x_ticks(self, rule: list[str], under: list[str]) -> None:
        """`┬` and the label under it at each tick whose label fits beside the last."""
        if self.x_range is None:
            return
        free_from = 0
        for position, label in sorted(self.f._xticks):
            lo, hi = self.x_range
            if not lo <= position <= hi:
                continue
            at = self.label_w + 1 + self._col(position)
            start = at - (len(label) - 1) // 2
            start = min(max(start, 0), self.width - len(label))
            if start < free_from or start < 0:
                continue
            rule[at] = "┬"
            under[start: start + len(label)] = label
            free_from = start + len(label) + 1

    def _series(self, s: _Series, grid: list[list[str]], tint: list[list[Colour]]) -> None:
        h, w = self.plot_h, self.plot_w
        if s.kind == "vline":
            col = self._col(s.xs[0])
            if 0 <= col < w:
                for row in range(h):
                    grid[row][col] = s.marker
                    tint[row][col] = s.colour
            return
        if s.kind == "line" and s.marker == BRAILLE:
            self._braille(s.xs, s.ys, s.colour, grid, tint)
            return
        cells = [(self._col(x), self._row(y)) for x, y in zip(s.xs, s.ys, strict=True)]
        if s.kind == "line":
            cells = _joined(cells)
        for col, row in cells:
            if 0 <= col < w and 0 <= row < h:
                grid[row][col] = s.marker
                tint[row][col] = s.colour

    def _braille(self, xs: Sequence[float], ys: Sequence[float], colour: Colour,
                 grid: list[list[str]], tint: list[list[Colour]]) -> None:
        assert self.x_range is not None and self.y_range is not None
        (x_lo, x_hi), (y_lo, y_hi) = self.x_range, self.y_range
        dots_w, dots_h = 2 * self.plot_w, 4 * self.plot_h
        fx, fy = dots_w - 1, dots_h - 1
        dots = [(round(_fraction(x, x_lo, x_hi) * fx),
                 fy - round(_fraction(y, y_lo, y_hi) * fy))
                for x, y in zip(xs, ys, strict=True)]
        bits: dict[tuple[int, int], int] = {}
        for dx, dy in _joined(dots):
            if 0 <= dx < dots_w and 0 <= dy < dots_h:
                cell = (dy >> 2, dx >> 1)
                bits[cell] = bits.get(cell, 0) | _DOT[dy & 3][dx & 1]
        for (row, col), value in bits.items():
            grid[row][col] = chr(0x2800 + value)
            tint[row][col] = colour


def _joined(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Every grid point on the polyline through `points`."""
    if len(points) < 2:
        return points
    out: list[tuple[int, int]] = []
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if abs(x1 - x0) <= 1 and abs(y1 - y0) <= 1:
            out.append((x0, y0))
        else:
            out.extend(_segment(x0, y0, x1, y1)[:-1])
    out.append(points[-1])
    return out


def _on_log_axis(s: _Series) -> _Series:
    if s.kind == "vline":
        return s
    kept = [(x, math.log10(y)) for x, y in zip(s.xs, s.ys, strict=True) if y > 0]
    return _Series(s.kind, tuple(x for x, _ in kept), tuple(y for _, y in kept), s.colour,
                   s.marker)


def _span(lo: float, hi: float, pad: float) -> tuple[float, float]:
    """[lo, hi] (finite), or around a single value, `pad` each way or a 1024th of the
    value where that is more (0.5 is nothing beside 1e20), within the finite floats: a
    range with lo < hi whatever the values."""
    lo, hi = min(lo, hi), max(lo, hi)
    if lo < hi:
        return lo, hi
    pad = max(pad, abs(lo) / 1024)
    return max(lo - pad, -_LARGEST), min(hi + pad, _LARGEST)


def _put_centred(chars: list[str], text: str, start: int, end: int) -> None:
    text = text[: max(0, end - start)]
    at = start + (end - start - len(text)) // 2
    chars[at: at + len(text)] = text
