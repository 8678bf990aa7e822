"""Train loss (raw and smoothed) and validation loss on one axis, x = step.

Drawn through `self.plt` at render time, with colours read from the active theme, so a
theme switch or a resize redraws correctly without any global plotext state. Markers:
divergence (vertical line), spikes and non-finite losses, and the best validation step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.console import RenderableType
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from cockpit.snapshot import Effect, Series
from cockpit.ui.themes import rgb


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
    """Loss drawn at the bucket closest to `step`, to put a marker on the curve."""
    if not xs:
        return None
    index = min(range(len(xs)), key=lambda i: abs(xs[i] - step))
    return ys[index]


class LossChart(PlotextPlot):
    effect: reactive[Effect | None] = reactive(None)
    log_y: reactive[bool] = reactive(False)

    def render(self) -> RenderableType:
        self._draw()
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_color()
        variables = self.app.theme_variables
        plt.canvas_color(rgb(variables, "surface"))
        plt.axes_color(rgb(variables, "surface"))
        plt.ticks_color(rgb(variables, "foreground"))
        plt.yscale("log" if self.log_y else "linear")
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
            plt.plot(raw_x, raw_y, color=rgb(variables, "foreground-muted"), marker="dot",
                     label="train")
        if ema_x:
            plt.plot(ema_x, ema_y, color=rgb(variables, "primary"), marker="braille",
                     label="train EMA")
        if val_x:
            # Points only: evaluations are sparse, and a joining line would hide the EMA.
            plt.scatter(val_x, val_y, color=rgb(variables, "accent"), marker="◆", label="val")
        if not (raw_x or ema_x or val_x):
            plt.title("loss: no finite values yet")
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
                        marker="✖", color=rgb(variables, "error"), label="NaN/Inf")
        best = effect.best_val_loss
        if effect.best_val_step is not None and best is not None and math.isfinite(best) and (
            best > 0 or not self.log_y
        ):
            plt.scatter([effect.best_val_step], [best], marker="★",
                        color=rgb(variables, "success"), label="best val")

    def _scatter(self, steps: Iterable[int], xs: list[float], ys: list[float],
                 marker: str, color: tuple) -> None:
        points = [(s, nearest_y(xs, ys, s)) for s in steps]
        points = [(s, y) for s, y in points if y is not None]
        if points:
            self.plt.scatter([s for s, _ in points], [y for _, y in points], marker=marker,
                             color=color, label="spike")

    def watch_effect(self) -> None:
        self.refresh()

    def watch_log_y(self) -> None:
        self.refresh()
