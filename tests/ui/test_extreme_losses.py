"""Losses at the ends of the floats (±1.7e308, finite, so stored as they came) reach the
snapshot's curve and the loss chart draws them, on a linear and a logarithmic axis: a
span past the largest float was an OverflowError inside the chart's drawing, which the
app does not catch, and a replay or a watch of such a recording ended there."""

from __future__ import annotations

import math

import pytest

from agent.wire.protocol import encode
from cockpit.read.source import build_snapshot
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Series, Snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from cockpit.ui.app_factory import make_app
from cockpit.ui.widgets.compare_chart import (
    CompareChart,
    CompareCurve,
    CompareView,
    _time_ticks,
)
from cockpit.ui.widgets.loss_chart import ChartWidget, LossChart, step_ticks
from tests.store.wire import TS0
from tests.ui.helpers import settle

HUGE = 1.7e308
LOSSES = (-HUGE, HUGE, 1e308, 1e-308, -1e308, HUGE)


def _records() -> bytes:
    lines = []
    for seq, step in enumerate(range(1, 61), start=1):
        loss = LOSSES[step % len(LOSSES)]
        lines.append(encode("train", seq, {
            "job": "j1", "rank": 0, "step": step, "loss": loss, "step_time": 0.5,
            "comm_time": 0.1, "samples": 8}, ts=TS0 + step))
    return b"".join(lines)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    path = tmp_path_factory.mktemp("extreme") / "run.duckdb"
    with Store(path) as store:
        store.ingest("h1", _records())
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")


def _lines(chart: ChartWidget) -> list[str]:
    return ["".join(segment.text for segment in strip) for strip in chart._draw_lines()]


def test_the_losses_reach_the_snapshot_as_they_came(snapshot: Snapshot) -> None:
    drawn = [v for v in snapshot.effect.train_loss.last if v is not None]
    assert min(drawn) <= -1e308 and max(drawn) >= 1e308


async def test_the_loss_chart_draws_them_on_either_axis(snapshot: Snapshot) -> None:
    app = make_app(StaticSource(snapshot), theme="dark")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        assert chart.effect is not None and chart.effect.train_loss.x
        lines = _lines(chart)
        assert any("┌" in line for line in lines) and any("└" in line for line in lines)
        assert any("e+308┤" in line for line in lines), lines  # round labels, in reach
        assert "•" in "".join(lines)  # the raw losses are drawn
        assert "e+308" in str(chart.render())
        await pilot.press("g")  # the logarithmic axis: the positive ones
        await settle(pilot)
        assert chart.log_y
        lines = _lines(chart)
        # Powers of ten from 1e-308 up past 1e+200, the huge ones drawn at the top.
        ticks = [line[:line.index("┤")].strip() for line in lines if "┤" in line]
        exponents = [math.log10(float(tick)) for tick in ticks]
        assert min(exponents) <= -300 and max(exponents) >= 200, lines
        assert "•" in "".join(lines) and lines[1].strip(" │"), lines  # up to the top
        await pilot.press("g")
        await settle(pilot)
    # Leaving the test context re-raises whatever the app died of while drawing.


async def test_the_compare_chart_draws_them(snapshot: Snapshot) -> None:
    from textual.app import App, ComposeResult

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield CompareChart(id="chart")

    app = One()
    async with app.run_test(size=(100, 30)) as pilot:
        chart = app.query_one(CompareChart)
        chart.view = CompareView("step", (
            CompareCurve("huge", snapshot.effect.train_loss, ((5.0, -HUGE), (9.0, HUGE))),
            CompareCurve("equal", Series(x=(1.0, 2.0), last=(HUGE, HUGE))),
        ))
        await pilot.pause()
        lines = _lines(chart)
        assert any("e+308┤" in line for line in lines), lines
        assert [label for label, _, _ in chart.drawn] == ["huge", "equal"]


def test_the_x_axes_ticks_are_total_over_floats() -> None:
    assert step_ticks(math.nan, 5.0) == [] and step_ticks(0.0, math.inf) == []
    for lo, hi in ((-HUGE, HUGE), (0.0, 1e308), (1e308, 1e308)):
        ticks = step_ticks(lo, hi)
        assert 1 <= len(ticks) <= 6 and all(abs(t) <= 2**63 for t in ticks)
    assert step_ticks(0, 340) == [0, 100, 200, 300]  # as before
    times = _time_ticks(-HUGE, HUGE)
    assert len(times) == 6 and all(math.isfinite(t) for t in times)
    assert times == sorted(times) and times[0] == -HUGE and times[-1] == HUGE
    assert _time_ticks(0.0, 100.0) == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
