"""Train and validation losses of several jobs overlaid on one axis: the step, or the
time since each job's first step (two runs started a day apart then overlay from
their starts).

Each job has its own theme colour, its train loss a line, its evaluations points of
the same colour; the legend names them, the job names as text (they come from the
hosts). Drawn through the loss chart's machinery (`ChartWidget`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from textual.content import Content
from textual.reactive import reactive

from cockpit.analysis.text import duration
from cockpit.read.compare import STEP_AXIS
from cockpit.snapshot import Series
from cockpit.ui import format as fmt
from cockpit.ui.themes import rgb
from cockpit.ui.widgets.loss_chart import ChartWidget, finite_points, step_labels, step_ticks
from cockpit.ui.widgets.plot_canvas import BRAILLE

# One theme colour per job, in the order the jobs are given.
COLOURS = ("primary", "accent", "success", "warning", "error", "secondary")
TIME_TICKS = 6


@dataclass(frozen=True)
class CompareCurve:
    label: str
    train: Series
    val: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class CompareView:
    axis: str  # one of `cockpit.read.compare.AXES`
    curves: tuple[CompareCurve, ...] = ()


def colour_of(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def compare_legend(view: CompareView | None) -> Content:
    """`━ parent  ━ fork`, each in its curve's colour, the names as text; "◆ val" when
    any job has evaluations."""
    if view is None or not view.curves:
        return Content("")
    parts = [fmt.markup(f"[${colour_of(i)}]━[/] $label", label=curve.label)
             for i, curve in enumerate(view.curves)]
    if any(curve.val for curve in view.curves):
        parts.append(Content("◆ validation loss"))
    return Content("  ").join(parts)


def _time_ticks(lo: float, hi: float) -> list[float]:
    if hi <= lo:
        return [lo]
    spacing = (hi - lo) / (TIME_TICKS - 1)
    if not math.isfinite(spacing):  # hi - lo past the largest float: from the middle
        middle, half = lo / 2 + hi / 2, hi / 2 - lo / 2
        return [middle + half * (2 * i / (TIME_TICKS - 1) - 1) for i in range(TIME_TICKS)]
    return [lo + i * spacing for i in range(TIME_TICKS)]


class CompareChart(ChartWidget):
    view: reactive[CompareView | None] = reactive(None)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # (label, train points, validation points) of each job last drawn: what the
        # chart shows, for a reader that cannot see colours (and for tests).
        self.drawn: tuple[tuple[str, int, int], ...] = ()

    def _draw(self) -> None:
        plt = self.figure
        variables = self._canvas()
        view = self.view
        drawn: list[tuple[str, int, int]] = []
        if view is None or not view.curves:
            plt.title("compare: waiting for data")
            self.drawn = ()
            return
        plt.title("")
        plt.xlabel("step" if view.axis == STEP_AXIS else "time since the job's first step")
        every_x: list[float] = []
        for i, curve in enumerate(view.curves):
            colour = rgb(variables, colour_of(i))
            xs, ys = finite_points(curve.train)
            if xs:
                plt.plot(xs, ys, colour=colour, marker=BRAILLE)
            val = [(x, y) for x, y in curve.val]
            if val:
                plt.scatter([x for x, _ in val], [y for _, y in val], colour=colour,
                            marker="◆")
            every_x += xs + [x for x, _ in val]
            drawn.append((curve.label, len(xs), len(val)))
        self.drawn = tuple(drawn)
        if not every_x:
            plt.title("compare: no finite losses yet")
            return
        self._ticks(view.axis, min(every_x), max(every_x))

    def _ticks(self, axis: str, lo: float, hi: float) -> None:
        plt = self.figure
        if axis == STEP_AXIS:
            ticks = step_ticks(lo, hi)
            positions: list[float] = list(ticks)
            plt.xticks(positions, step_labels(ticks))
            if len(ticks) == 1:
                plt.xlim(ticks[0] - 1, ticks[0] + 1)
            return
        times = _time_ticks(lo, hi)
        plt.xticks(times, [duration(t) for t in times])
        if len(times) == 1:
            plt.xlim(times[0] - 1, times[0] + 1)

    def watch_view(self) -> None:
        self._lines.forget()
        self.refresh()
