"""Train loss (raw and smoothed) and validation loss on one axis, x = step.

Drawn into `self.figure` at render time, with colours read from the active theme, so a
theme switch or a resize redraws correctly, with no state outside the widget. Markers:
divergence (vertical line), spikes and non-finite losses, the best validation step, and
along the bottom what was done to the run: operator adjustments (▼) and restarts from a
checkpoint (↻); along the top the faults seen while the job trained those steps:
XID (X), uncorrectable ECC (E), throttling (T), a host lost (U). `t` hides both rows.

The chart is redrawn on every refresh that brings new losses, so it is drawn by
`plot_canvas.Figure` (a few hundred points, one pass each) and its rows of coloured runs
go straight to screen lines through Textual's line API (`ChartWidget`); laying a plot
out as text content (wrapping, alignment, a selection offset on every run of cells)
costs more than drawing it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from cockpit.analysis.markers import ADJUST, RESTART
from cockpit.analysis.timeline import ECC_FAULT, THROTTLE_FAULT, UNREACHABLE_FAULT, XID_FAULT
from cockpit.snapshot import Effect, Marker, Series
from cockpit.ui.themes import rgb
from cockpit.ui.widgets.line_cache import LineCache
from cockpit.ui.widgets.plot_canvas import BRAILLE, Colour, Figure

# How each kind of `Marker` is drawn: (kind, plotted marker, legend label, theme colour).
# The operator's adjustments and restarts go along the bottom of a chart, the faults
# (`Effect.faults`) along its top: neither hides a point of the curve, and a letter
# names each fault kind, so colour is never the only thing telling them apart.
MARKER_STYLES = ((ADJUST, "▼", "adjusted", "secondary"),
                 (RESTART, "↻", "restart", "secondary"))
FAULT_STYLES = ((XID_FAULT, "X", "XID", "error"), (ECC_FAULT, "E", "ECC", "error"),
                (THROTTLE_FAULT, "T", "throttled", "warning"),
                (UNREACHABLE_FAULT, "U", "host lost", "error"))
STEP_LIMIT = 2.0**63  # a step axis reaches no further (`step_ticks`)


def timeline_legend(markers: Iterable[Marker], faults: Iterable[Marker]) -> list[str]:
    """Legend entries ("[$error]X[/] XID") of the timeline marks present."""
    kinds = {m.kind for m in markers} | {m.kind for m in faults}
    return [f"[${colour}]{marker}[/] {label}"
            for kind, marker, label, colour in (*MARKER_STYLES, *FAULT_STYLES)
            if kind in kinds]


def draw_timeline(plt: Figure, markers: Iterable[Marker], faults: Iterable[Marker],
                  bottom: float, top: float, variables: dict[str, str]) -> None:
    """The operator's marks at `bottom`, the faults at `top`, each at its step."""
    for styles, marks, y in ((MARKER_STYLES, markers, bottom), (FAULT_STYLES, faults, top)):
        shown = list(marks)
        for kind, marker, _label, colour in styles:
            steps = [m.step for m in shown if m.kind == kind]
            if steps:
                plt.scatter(steps, [y] * len(steps), marker=marker,
                            colour=rgb(variables, colour))

def legend(effect: Effect | None, log_y: bool, timeline: bool = True) -> str:
    """What the chart draws, each in its marker and colour: a line of its own rather than
    a legend inside the plot, top left, where a loss curve starts. `timeline`: the
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


def step_ticks(lo: float, hi: float, count: int = 6) -> list[int]:
    """Whole steps at a round spacing (1, 2, 2.5 or 5 × 10^k) across [lo, hi]: steps
    are counted, and "340.2" or "-0.50" on a step axis only puzzle the reader. Total over
    floats: none where lo or hi is not finite, and within ±2**63 (the store keeps steps
    below 2**53), so no figure here outgrows a float."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    lo, hi = (min(max(v, -STEP_LIMIT), STEP_LIMIT) for v in (lo, hi))
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


class ChartWidget(Widget):
    """A chart drawn by `_draw` into `self.figure` and shown through the line API,
    redrawn only when `_drawn_from()` changes (and on resize or theme change)."""

    ALLOW_SELECT = False  # a plot is not text to copy

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # A plot has no links: skip the pass over every drawn segment that looks for them.
        self.set_reactive(Widget.auto_links, False)
        self.figure = Figure()
        # Each colour's line style, per theme and base style (a chart uses a handful).
        self._styles: dict[tuple[str, Any], dict[Colour, RichStyle]] = {}
        self._lines = LineCache()

    def render(self) -> Content:
        """The chart as plain text, row under row: what the screen shows through
        `render_line`, without its colours."""
        width, height = self.size
        self._draw()
        rows = self.figure.rows(width, height)
        return Content("\n".join("".join(text for text, _ in runs) for runs in rows))

    def render_line(self, y: int) -> Strip:
        """Textual's line API: the chart's screen lines, drawn once per drawing."""
        return self._lines.line(self, y, self._drawn_from(), self._draw_lines)

    def _drawn_from(self) -> Any:
        """What the drawing depends on besides the data (whose change calls `forget`)."""
        return None

    def _draw_lines(self) -> list[Strip]:
        width, height = self.size
        if not (width and height):
            return []
        self._draw()
        base = self.visual_style
        variables = self.app.theme_variables
        styles = self._styles.setdefault((self.app.theme, base), {})
        strips = []
        for runs in self.figure.rows(width, height):
            segments = []
            for text, colour in runs:
                style = styles.get(colour)
                if style is None:
                    style = styles[colour] = base.rich_style + RichStyle(
                        color=RichColor.from_rgb(*(colour or rgb(variables, "foreground"))),
                        bgcolor=RichColor.from_rgb(*rgb(variables, "surface")))
                segments.append(Segment(text, style))
            strips.append(Strip(segments, width))
        return strips

    def _draw(self) -> None:
        """Draw the data into `self.figure`."""

    def _canvas(self) -> dict[str, str]:
        """`self.figure` cleared; the theme's variables."""
        self.figure.clear()
        return self.app.theme_variables


class LossChart(ChartWidget):
    """Redrawn only when `effect`, `log_y` or `timeline` change (and on resize or theme
    change)."""

    effect: reactive[Effect | None] = reactive(None)
    log_y: reactive[bool] = reactive(False)
    timeline: reactive[bool] = reactive(True)  # the operator's marks and the faults

    def _drawn_from(self) -> Any:
        return (self.log_y, self.timeline)

    def _draw(self) -> None:
        plt = self.figure
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
            plt.plot(raw_x, raw_y, colour=rgb(variables, "foreground-muted"), marker="•")
        if ema_x:
            plt.plot(ema_x, ema_y, colour=rgb(variables, "primary"), marker=BRAILLE)
        if val_x:
            # Points only: evaluations are sparse, and a joining line would hide the EMA.
            plt.scatter(val_x, val_y, colour=rgb(variables, "accent"), marker="◆")
        if raw_x or ema_x or val_x:
            ticks = step_ticks(min(raw_x + ema_x + val_x), max(raw_x + ema_x + val_x))
            positions: list[float] = list(ticks)
            plt.xticks(positions, step_labels(ticks))
            if len(ticks) == 1:  # one step so far: around it, not -1.00 … 1.00
                plt.xlim(ticks[0] - 1, ticks[0] + 1)
        if not (raw_x or ema_x or val_x):
            plt.title("loss: no finite values yet" if effect.train_loss.x or effect.val_loss.x
                      else "loss: no steps yet")
        plt.log_y(self.log_y)
        self._mark(effect, raw_x or ema_x, raw_y or ema_y, variables)

    def _mark(self, effect: Effect, xs: list[float], ys: list[float],
              variables: dict[str, str]) -> None:
        plt = self.figure
        if effect.divergence_step is not None:
            plt.vline(effect.divergence_step, colour=rgb(variables, "warning"))
        self._scatter(effect.spike_steps, xs, ys, "▲", rgb(variables, "warning"))
        if effect.nonfinite_steps:
            top = max(ys) if ys else 1.0
            plt.scatter(list(effect.nonfinite_steps), [top] * len(effect.nonfinite_steps),
                        marker="✖", colour=rgb(variables, "error"))
        best = effect.best_val_loss
        if effect.best_val_step is not None and best is not None and math.isfinite(best) and (
            best > 0 or not self.log_y
        ):
            plt.scatter([effect.best_val_step], [best], marker="★",
                        colour=rgb(variables, "success"))
        if ys and self.timeline:
            draw_timeline(plt, effect.markers, effect.faults, min(ys), max(ys), variables)

    def _scatter(self, steps: Iterable[int], xs: list[float], ys: list[float],
                 marker: str, colour: Colour) -> None:
        at_x: list[float] = []
        at_y: list[float] = []
        for step in steps:
            y = nearest_y(xs, ys, step)
            if y is not None:
                at_x.append(step)
                at_y.append(y)
        if at_x:
            self.figure.scatter(at_x, at_y, marker=marker, colour=colour)

    def watch_effect(self) -> None:
        self._lines.forget()
        self.refresh()

    def watch_log_y(self) -> None:
        self.refresh()

    def watch_timeline(self) -> None:
        self.refresh()
