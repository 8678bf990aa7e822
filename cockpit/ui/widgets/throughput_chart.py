"""Throughput over the run, x = step, with the same timeline marks as the loss chart.

On the loss chart's axis, so a dip here and a spike there line up with the restart or
the fault between them: a throttled GPU slows every rank, an XID ends the attempt and
the restart picks up from the checkpoint's step (↻). Drawn through the loss chart's
machinery (`ChartWidget`), redrawn only when what it shows changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.reactive import reactive

from cockpit.snapshot import Marker, Series
from cockpit.ui.themes import rgb
from cockpit.ui.widgets.loss_chart import (
    ChartWidget,
    draw_timeline,
    finite_points,
    step_labels,
    step_ticks,
)
from cockpit.ui.widgets.plot_canvas import BRAILLE


@dataclass(frozen=True)
class Throughput:
    """What the chart draws: the series (one point per step bucket) and its marks."""

    series: Series = field(default_factory=Series)
    markers: tuple[Marker, ...] = ()  # the operator's adjustments and the restarts
    faults: tuple[Marker, ...] = ()


class ThroughputChart(ChartWidget):
    data: reactive[Throughput | None] = reactive(None)
    timeline: reactive[bool] = reactive(True)  # the operator's marks and the faults

    def _drawn_from(self) -> Any:
        return self.timeline

    def _draw(self) -> None:
        plt = self.figure
        variables = self._canvas()
        plt.xlabel("")
        data = self.data
        xs, ys = finite_points(data.series) if data is not None else ([], [])
        if data is None or not xs:
            plt.title("throughput: no steps yet")
            return
        plt.title("")
        plt.plot(xs, ys, colour=rgb(variables, "primary"), marker=BRAILLE)
        ticks = step_ticks(min(xs), max(xs))
        positions: list[float] = list(ticks)
        plt.xticks(positions, step_labels(ticks))
        if len(ticks) == 1:
            plt.xlim(ticks[0] - 1, ticks[0] + 1)
        if self.timeline:
            draw_timeline(plt, data.markers, data.faults, min(ys), max(ys), variables)

    def watch_data(self) -> None:
        self._lines.forget()
        self.refresh()

    def watch_timeline(self) -> None:
        self.refresh()
