"""What a new snapshot costs the screen: only the widgets whose content changed are
redrawn, and the screen is laid out again only when something changed size."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.content import Content
from textual.pilot import Pilot
from textual.widgets import Static

from cockpit.snapshot import RankTime, Snapshot
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.static_source import StaticSource
from cockpit.ui.widgets.loss_chart import LossChart
from tests.ui.helpers import settle, text


class _Counts:
    def __init__(self) -> None:
        self.layouts = 0
        self.full_repaints = 0
        self.chart_draws = 0


def _count(pilot: Pilot) -> _Counts:
    """Count the screen's layout passes, its repaints of every cell, and the loss
    chart's redraws from now on."""
    counts = _Counts()
    screen = pilot.app.screen
    refresh_layout = screen._refresh_layout
    full_update = screen._compositor.render_full_update
    chart = screen.query_one(LossChart)
    draw = chart._draw

    def counting_layout(*args: object, **kwargs: object) -> None:
        counts.layouts += 1
        refresh_layout(*args, **kwargs)

    def counting_full_update(*args: object, **kwargs: object) -> object:
        counts.full_repaints += 1
        return full_update(*args, **kwargs)

    def counting_draw() -> None:
        counts.chart_draws += 1
        draw()

    screen._refresh_layout = counting_layout  # type: ignore[method-assign]
    chart._draw = counting_draw  # type: ignore[method-assign]
    screen._compositor.render_full_update = counting_full_update  # type: ignore[method-assign]
    return counts


async def _show(pilot: Pilot, snapshot: Snapshot) -> None:
    pilot.app.main_screen.snapshot = snapshot
    await settle(pilot)


async def test_a_snapshot_that_moves_only_the_clock_repaints_lines_not_the_screen() -> None:
    first = demo_snapshot()
    app = make_app(StaticSource(first))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        counts = _count(pilot)
        later = dataclasses.replace(
            first, ts=first.ts + 30,
            progress=dataclasses.replace(first.progress, since_last_step=31.0))
        await _show(pilot, later)
        assert "last step 31s ago" in text(app, "#progress-last")
        assert counts.layouts == 0
        assert counts.full_repaints == 0
        assert counts.chart_draws == 0


async def test_a_line_that_needs_more_rows_gets_them() -> None:
    first = demo_snapshot()
    first = dataclasses.replace(
        first, efficiency=dataclasses.replace(first.efficiency, slowest_ranks=()))
    app = make_app(StaticSource(first))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        stragglers = app.screen.query_one("#stragglers", Static)
        assert stragglers.content_size.height == 1
        counts = _count(pilot)
        slow = (RankTime(3, "gpu-node-a", 1.2),)
        await _show(pilot, dataclasses.replace(
            first, efficiency=dataclasses.replace(first.efficiency, slowest_ranks=slow)))
        assert "slowest: r3@gpu-node-a" in text(app, "#stragglers")
        assert stragglers.content_size.height == 2
        assert counts.layouts >= 1


async def test_new_losses_redraw_the_chart_once() -> None:
    first = demo_snapshot()
    app = make_app(StaticSource(first))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        counts = _count(pilot)
        loss = first.effect.train_loss
        moved = dataclasses.replace(loss, last=(*loss.last[:-1], (loss.last[-1] or 1.0) * 2))
        await _show(pilot, dataclasses.replace(
            first, ts=first.ts + 1, effect=dataclasses.replace(first.effect, train_loss=moved)))
        assert counts.chart_draws == 1
        assert counts.layouts == counts.full_repaints == 0


async def test_the_chart_read_from_plotext_matrix_equals_its_ansi_output() -> None:
    """The chart skips plotext's ANSI text; what it shows must be what that text says,
    for every theme, both axis scales and an empty chart."""
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        for theme in app.theme_names:
            app.theme = theme
            for log_y, effect in ((False, chart.effect), (True, chart.effect), (False, None)):
                chart.log_y = log_y
                chart.effect = effect
                shown = chart.render()
                assert isinstance(shown, Content)
                chart._draw()  # the same drawing again, written out by plotext as ANSI
                ansi = Content.from_rich_text(Text.from_ansi(chart.plt.build()),
                                              console=app.console)
                assert shown == ansi, (theme, log_y, effect is None)
                assert len(shown.spans) > 3
