"""A labelled sparkline of a downsampled series (throughput or GPU busy history)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Label

from cockpit.snapshot import Series
from cockpit.ui.widgets.spark_bars import SparkBars


def series_values(series: Series) -> list[float]:
    """Bucket values with gaps dropped: a sparkline shows the shape, not the gaps."""
    return [v for v in series.last if v is not None and v == v]


class SparklineChart(Horizontal):
    DEFAULT_CSS = """
    SparklineChart { height: 1; width: 1fr; }
    SparklineChart > Label { width: 11; }
    SparklineChart > SparkBars { width: 1fr; }
    """

    series: reactive[Series | None] = reactive(None, repaint=False)  # the Sparkline repaints

    def __init__(self, label: str, series: Series | None = None, *,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label
        self.set_reactive(SparklineChart.series, series)

    def compose(self) -> ComposeResult:
        yield Label(self.label)
        yield SparkBars(series_values(self.series) if self.series else [])

    def watch_series(self, series: Series | None) -> None:
        for line in self.query(SparkBars):
            line.data = series_values(series) if series else []
