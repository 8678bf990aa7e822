"""A labelled sparkline of a downsampled series (throughput, GPU busy, a host's history).

Bars alone show a shape but not its scale: in a drill-down, where one line may be a
temperature and the next a memory size, each sparkline can also print the newest value
and the range it spans, in the series' unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label

from cockpit.snapshot import Series
from cockpit.ui import format as fmt
from cockpit.ui.widgets.spark_bars import DATA_RANGE, Scale, SparkBars

ValueText = Callable[[float], str]


def series_values(series: Series) -> list[float]:
    """Bucket values with gaps dropped: a sparkline shows the shape, not the gaps."""
    return [v for v in series.last if v is not None and v == v]


def _finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def range_text(series: Series | None, value_text: ValueText) -> str:
    """"now 94% · 0%–96%": the newest value, then the lowest and highest sample (from the
    buckets' min and max, so a one-sample spike is not averaged away)."""
    last = _finite(series.last) if series else []
    if not last or series is None:
        return "no data"
    lows = _finite(series.lo) or last
    highs = _finite(series.hi) or last
    return f"now {value_text(last[-1])} · {value_text(min(lows))}–{value_text(max(highs))}"


class SparklineChart(Horizontal):
    DEFAULT_CSS = """
    SparklineChart { height: 1; width: 1fr; }
    SparklineChart > Label { width: 11; }
    SparklineChart > SparkBars { width: 1fr; }
    SparklineChart > Label.spark-range { width: auto; min-width: 28; padding: 0 0 0 1; }
    """

    series: reactive[Series | None] = reactive(None, repaint=False)  # the Sparkline repaints

    def __init__(self, label: str, series: Series | None = None, *,
                 value_text: ValueText | None = None, scale: Scale = DATA_RANGE,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = label
        self.value_text = value_text
        self.scale = scale  # what the bars' heights stand for (`spark_bars.Scale`)
        self.set_reactive(SparklineChart.series, series)

    def compose(self) -> ComposeResult:
        yield Label(fmt.text(self.label))  # a drill-down names a series by a wire key
        yield SparkBars(series_values(self.series) if self.series else [], scale=self.scale)
        if self.value_text is not None:
            yield Label(fmt.text(range_text(self.series, self.value_text)),
                        classes="spark-range")

    def watch_series(self, series: Series | None) -> None:
        for line in self.query(SparkBars):
            line.data = series_values(series) if series else []
        if self.value_text is not None:
            text = fmt.text(range_text(series, self.value_text))
            for label in self.query(".spark-range").results(Label):
                shown = label.content
                if isinstance(shown, Content) and shown.is_same(text):
                    continue
                # The label is as wide as its text: the screen is laid out again (every
                # widget on it arranged) only when that width changes, not on every
                # refresh that brings a new value.
                label.update(text, layout=not isinstance(shown, Content)
                             or shown.cell_length != text.cell_length)
