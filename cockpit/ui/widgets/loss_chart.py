"""Train loss (raw and smoothed) and validation loss on one axis, x = step.

Drawn through `self.plt` at render time, with colours read from the active theme, so a
theme switch or a resize redraws correctly without any global plotext state. Markers:
divergence (vertical line), spikes and non-finite losses, the best validation step, and
along the bottom what was done to the run: operator adjustments (▼) and restarts from a
checkpoint (↻); along the top the faults seen while the job trained those steps:
XID (X), uncorrectable ECC (E), throttling (T), a host lost (U). `t` hides both rows.

The chart is redrawn on every refresh that brings new losses, so the drawing is turned
into screen lines straight from plotext's character matrix (`matrix_strips`, through
Textual's line API): writing it out as ANSI text and parsing that back, as
`PlotextPlot.render` does, costs more than plotting it, and so does laying a plot out
as text content (wrapping, alignment, a selection offset on every run of cells). What
is shown is the same either way (`render` still gives the content, for comparison).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

from plotext import _utility as plotext_utility
from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.terminal_theme import TerminalTheme
from rich.text import Text
from textual.content import Content, Span
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style
from textual.visual import Visual
from textual.widget import Widget
from textual_plotext import PlotextPlot

from cockpit.snapshot import Effect, Marker, Series
from cockpit.ui.themes import rgb
from cockpit.ui.widgets.line_cache import LineCache

# How each kind of `Marker` is drawn: (kind, plotted marker, legend label, theme colour).
# The operator's adjustments and restarts go along the bottom of a chart, the faults
# (`Effect.faults`) along its top: neither hides a point of the curve, and a letter
# names each fault kind, so colour is never the only thing telling them apart.
MARKER_STYLES = (("adjust", "▼", "adjusted", "secondary"),
                 ("restart", "↻", "restart", "secondary"))
FAULT_STYLES = (("xid", "X", "XID", "error"), ("ecc", "E", "ECC", "error"),
                ("throttle", "T", "throttled", "warning"),
                ("unreachable", "U", "host lost", "error"))


def timeline_legend(markers: Iterable[Marker], faults: Iterable[Marker]) -> list[str]:
    """Legend entries ("[$error]X[/] XID") of the timeline marks present."""
    kinds = {m.kind for m in markers} | {m.kind for m in faults}
    return [f"[${colour}]{marker}[/] {label}"
            for kind, marker, label, colour in (*MARKER_STYLES, *FAULT_STYLES)
            if kind in kinds]


def draw_timeline(plt: Any, markers: Iterable[Marker], faults: Iterable[Marker],
                  bottom: float, top: float, variables: dict[str, str]) -> None:
    """The operator's marks at `bottom`, the faults at `top`, each at its step."""
    for styles, marks, y in ((MARKER_STYLES, markers, bottom), (FAULT_STYLES, faults, top)):
        shown = list(marks)
        for kind, marker, _label, colour in styles:
            steps = [m.step for m in shown if m.kind == kind]
            if steps:
                plt.scatter(steps, [y] * len(steps), marker=marker,
                            color=rgb(variables, colour))

def legend(effect: Effect | None, log_y: bool, timeline: bool = True) -> str:
    """What the chart draws, each in its marker and colour: a line of its own rather than
    plotext's legend, which sits top left, where a loss curve starts. `timeline`: the
    operator's marks and the faults are shown (`t` hides them)."""
    if effect is None:
        return ""
    drawn = [
        (bool(finite_points(effect.train_loss, log_y)[0]), "•", "foreground-muted", "train"),
        (bool(finite_points(effect.train_loss_ema, log_y)[0]), "⠉⠒", "primary", "EMA"),
        (bool(finite_points(effect.val_loss, log_y)[0]), "◆", "accent", "val"),
        (effect.best_val_step is not None and effect.best_val_loss is not None
         and math.isfinite(effect.best_val_loss) and (effect.best_val_loss > 0 or not log_y),
         "★", "success", "best val"),
        (bool(effect.spike_steps), "▲", "warning", "spike"),
        (bool(effect.nonfinite_steps), "✖", "error", "NaN/Inf"),
        (effect.divergence_step is not None, "│", "warning", "diverging"),
    ]
    entries = [f"[${colour}]{marker}[/] {label}"
               for shown, marker, colour, label in drawn if shown]
    if timeline:
        entries += timeline_legend(effect.markers, effect.faults)
    elif effect.markers or effect.faults:
        entries.append("[$text-muted]events hidden[/]")
    return "  ".join(entries)


def finite_points(series: Series, positive: bool = False) -> tuple[list[float], list[float]]:
    """The plottable (x, y) pairs of a series: None, NaN and ±Inf dropped (and y <= 0
    when the axis is logarithmic, where they have no place)."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in zip(series.x, series.last, strict=False):
        if y is None or not math.isfinite(y) or (positive and y <= 0):
            continue
        xs.append(x)
        ys.append(y)
    return xs, ys


def nearest_y(xs: list[float], ys: list[float], step: float) -> float | None:
    """Loss drawn at the bucket closest to `step` (xs ascending; of two as close, the
    earlier), to put a marker on the curve."""
    if not xs:
        return None
    right = bisect_left(xs, step)
    if right == len(xs) or (right > 0 and step - xs[right - 1] <= xs[right] - step):
        return ys[right - 1]
    return ys[right]


def _cell_style(colors: tuple[Any, Any, Any], ansi_theme: TerminalTheme) -> Style | None:
    """The style of a run of cells with these plotext colours (foreground, style,
    background): what parsing plotext's ANSI codes for them gives."""
    parsed = Text.from_ansi(plotext_utility.colors_to_ansi(*colors) + " ")
    style = parsed.spans[0].style if parsed.spans else None
    return Style.from_rich_style(style, ansi_theme) if isinstance(style, RichStyle) else None


def _runs(matrix: Any) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Each row of a built plotext matrix, top row first, as runs of cells of the same
    colours: (the run's characters, its (foreground, style, background))."""
    cols = matrix.cols
    for row in range(matrix.rows - 1, -1, -1):
        markers = matrix.marker[row]
        fore, style, back = matrix.fullground[row], matrix.style[row], matrix.background[row]
        runs = []
        col = 0
        while col < cols:
            colors = (fore[col], style[col], back[col])
            end = col + 1
            while end < cols and (fore[end], style[end], back[end]) == colors:
                end += 1
            key = tuple(tuple(c) if isinstance(c, list) else c for c in colors)
            runs.append(("".join(markers[col:end]), key))
            col = end
        yield runs


def matrix_content(matrix: Any, ansi_theme: TerminalTheme,
                   styles: dict[tuple[Any, ...], Style | None]) -> Content:
    """A built plotext matrix as Content, one span per run of cells of the same
    colours: equal to `Content.from_rich_text(Text.from_ansi(plt.build()))`.

    `styles` remembers the style of each colour combination (a plot uses a handful).
    """
    parts: list[str] = []
    spans: list[Span] = []
    at = 0
    for runs in _runs(matrix):
        for run, key in runs:
            if key not in styles:
                styles[key] = _cell_style(key, ansi_theme)
            if (found := styles[key]) is not None:
                spans.append(Span(at, at + len(run), found))
            parts.append(run)
            at += len(run)
        parts.append("\n")
        at += 1
    return Content("".join(parts), spans)


def matrix_strips(matrix: Any, ansi_theme: TerminalTheme, base: Style,
                  styles: dict[tuple[Any, ...], RichStyle]) -> list[Strip]:
    """A built plotext matrix as screen lines: what Textual makes of `matrix_content`
    on a widget whose own style is `base`, less the selection offsets.

    `styles` remembers the line style of each colour combination.
    """
    strips = []
    for runs in _runs(matrix):
        segments = []
        for run, key in runs:
            if (found := styles.get(key)) is None:
                cell = _cell_style(key, ansi_theme)
                found = styles[key] = (base + cell).rich_style if cell else base.rich_style
            segments.append(Segment(run, found))
        strips.append(Strip(segments, matrix.cols))
    return strips


def step_ticks(lo: float, hi: float, count: int = 6) -> list[int]:
    """Whole steps at a round spacing (1, 2, 2.5 or 5 × 10^k) across [lo, hi]: steps
    are counted, and "340.2" or "-0.50" on a step axis only puzzle the reader."""
    first, last = math.ceil(lo), math.floor(hi)
    if last <= first:
        return [round(lo)]
    raw = (last - first) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    spacing = next(s for s in (m * magnitude for m in (1, 2, 2.5, 5, 10))
                   if s >= raw and float(s).is_integer())
    start = math.ceil(first / spacing) * spacing
    return list(range(int(start), last + 1, int(spacing)))


def step_labels(ticks: list[int]) -> list[str]:
    """"850", "12.5k", "1.25M", in one unit for the whole axis so it stays narrow and
    reads evenly at any run length."""
    top = max((abs(t) for t in ticks), default=0)
    if top < 10_000:
        return [str(t) for t in ticks]
    factor, suffix = (1000, "k") if top < 1_000_000 else (1_000_000, "M")
    return [f"{t / factor:.4g}{suffix}" if t else "0" for t in ticks]


class MatrixPlot(PlotextPlot):
    """A plot drawn by `_draw` and shown through the line API (`matrix_strips`),
    redrawn only when `_drawn_from()` changes (and on resize or theme change)."""

    ALLOW_SELECT = False  # a plot is not text to copy

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # A plot has no links: skip the pass over every drawn segment that looks for them.
        self.set_reactive(Widget.auto_links, False)
        self._styles: dict[str, dict[tuple[Any, ...], Style | None]] = {}  # by app theme
        self._line_styles: dict[tuple[str, Style], dict[tuple[Any, ...], RichStyle]] = {}
        self._lines = LineCache()

    def _matrix(self) -> Any:
        """The plot drawn and built at the widget's size and theme: plotext's character
        matrix, or its ANSI text where this plotext lays its figure out otherwise."""
        self._draw()
        plt = self.plt
        width, height = self.size
        # As `PlotextPlot.render` sizes and themes the plot before building it.
        plt.plotsize(width, height)
        plt._set_size(width, height)
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        try:
            # What `plt.build()` does before writing the matrix as ANSI: plotext internals,
            # absent from its types, and from some versions (the fallback below).
            plt._set_sizes()  # type: ignore[attr-defined]  # textual-plotext's typed Plot omits it
            plt._build_matrix()  # type: ignore[attr-defined]  # textual-plotext's Plot omits it
            return plt.monitor.matrix  # type: ignore[attr-defined]  # textual-plotext's Plot omits it
        except AttributeError:
            return plt.build()

    def render(self) -> RenderableType | Content:
        matrix = self._matrix()
        if isinstance(matrix, str):
            return Text.from_ansi(matrix)
        styles = self._styles.setdefault(self.app.theme, {})
        return matrix_content(matrix, self.app.ansi_theme, styles)

    def render_line(self, y: int) -> Strip:
        """Textual's line API: the plot's screen lines, built once per drawing."""
        return self._lines.line(self, y, self._drawn_from(), self._draw_lines)

    def _drawn_from(self) -> Any:
        """What the drawing depends on besides the data (whose change calls `forget`)."""
        return None

    def _draw_lines(self) -> list[Strip]:
        if not (self.size.width and self.size.height):
            return []
        matrix = self._matrix()
        base = self.visual_style
        if isinstance(matrix, str):
            return Visual.to_strips(self, Content.from_rich_text(Text.from_ansi(matrix)),
                                    self.size.width, self.size.height, base)
        styles = self._line_styles.setdefault((self.app.theme, base), {})
        return matrix_strips(matrix, self.app.ansi_theme, base, styles)

    def _draw(self) -> None:
        """Plot the data on `self.plt`."""

    def _canvas(self) -> dict[str, str]:
        """`self.plt` cleared and coloured from the theme; the theme's variables."""
        plt = self.plt
        plt.clear_data()
        plt.clear_color()
        variables = self.app.theme_variables
        plt.canvas_color(rgb(variables, "surface"))
        plt.axes_color(rgb(variables, "surface"))
        plt.ticks_color(rgb(variables, "foreground"))
        plt.yscale("linear")
        return variables


class LossChart(MatrixPlot):
    """Redrawn only when `effect`, `log_y` or `timeline` change (and on resize or theme
    change)."""

    effect: reactive[Effect | None] = reactive(None)
    log_y: reactive[bool] = reactive(False)
    timeline: reactive[bool] = reactive(True)  # the operator's marks and the faults

    def _drawn_from(self) -> Any:
        return (self.log_y, self.timeline)

    def _draw(self) -> None:
        plt = self.plt
        variables = self._canvas()
        plt.xlabel("step")
        effect = self.effect
        if effect is None:
            plt.title("loss: waiting for data")
            return
        plt.title("")
        positive = self.log_y
        raw_x, raw_y = finite_points(effect.train_loss, positive)
        ema_x, ema_y = finite_points(effect.train_loss_ema, positive)
        val_x, val_y = finite_points(effect.val_loss, positive)
        if raw_x:
            plt.plot(raw_x, raw_y, color=rgb(variables, "foreground-muted"), marker="dot")
        if ema_x:
            plt.plot(ema_x, ema_y, color=rgb(variables, "primary"), marker="braille")
        if val_x:
            # Points only: evaluations are sparse, and a joining line would hide the EMA.
            plt.scatter(val_x, val_y, color=rgb(variables, "accent"), marker="◆")
        if raw_x or ema_x or val_x:
            ticks = step_ticks(min(raw_x + ema_x + val_x), max(raw_x + ema_x + val_x))
            positions: list[float] = list(ticks)
            plt.xticks(positions, step_labels(ticks))
            if len(ticks) == 1:  # one step so far: around it, not -1.00 … 1.00
                plt.xlim(ticks[0] - 1, ticks[0] + 1)
        if not (raw_x or ema_x or val_x):
            plt.title("loss: no finite values yet" if effect.train_loss.x or effect.val_loss.x
                      else "loss: no steps yet")
        elif self.log_y:
            # Only with points to place: plotext cannot lay out an empty log axis.
            plt.yscale("log")
        self._mark(effect, raw_x or ema_x, raw_y or ema_y, variables)

    def _mark(self, effect: Effect, xs: list[float], ys: list[float],
              variables: dict[str, str]) -> None:
        plt = self.plt
        if effect.divergence_step is not None:
            plt.vline(effect.divergence_step, color=rgb(variables, "warning"))
        self._scatter(effect.spike_steps, xs, ys, "▲", rgb(variables, "warning"))
        if effect.nonfinite_steps:
            top = max(ys) if ys else 1.0
            plt.scatter(list(effect.nonfinite_steps), [top] * len(effect.nonfinite_steps),
                        marker="✖", color=rgb(variables, "error"))
        best = effect.best_val_loss
        if effect.best_val_step is not None and best is not None and math.isfinite(best) and (
            best > 0 or not self.log_y
        ):
            plt.scatter([effect.best_val_step], [best], marker="★",
                        color=rgb(variables, "success"))
        if ys and self.timeline:
            draw_timeline(plt, effect.markers, effect.faults, min(ys), max(ys), variables)

    def _scatter(self, steps: Iterable[int], xs: list[float], ys: list[float],
                 marker: str, color: tuple) -> None:
        points = [(s, nearest_y(xs, ys, s)) for s in steps]
        points = [(s, y) for s, y in points if y is not None]
        if points:
            self.plt.scatter([s for s, _ in points], [y for _, y in points], marker=marker,
                             color=color)

    def watch_effect(self) -> None:
        self._lines.forget()
        self.refresh()

    def watch_log_y(self) -> None:
        self.refresh()

    def watch_timeline(self) -> None:
        self.refresh()
