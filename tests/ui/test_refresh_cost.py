"""What a new snapshot costs the screen: only the widgets whose content changed are
redrawn, and the screen is laid out again only when something changed size."""

from __future__ import annotations

import dataclasses

from rich.color import Color as RichColor
from textual.color import Color
from textual.pilot import Pilot
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widgets import ProgressBar, Static
from textual.widgets._progress_bar import Bar

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import RankTime, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.widgets.gauge import Gauge
from cockpit.ui.widgets.loss_chart import LossChart
from cockpit.ui.widgets.spark_bars import DATA_RANGE, FROM_ZERO, PERCENT, SparkBars
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
        assert "slowest, less comm wait: r3@gpu-node-a" in text(app, "#stragglers")
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


def _cells(strips: list[Strip]) -> list[list[tuple[object, ...]]]:
    """What a terminal shows of some lines: each cell's character and looks."""
    return [[(char, s.color, s.bgcolor, s.bold, s.dim, s.italic, s.underline, s.reverse)
             for segment in strip for s in (segment.style,) if s is not None
             for char in segment.text] for strip in strips]


def _rgb(colour: RichColor | None) -> tuple[int, int, int] | None:
    return None if colour is None else tuple(colour.get_truecolor())


async def test_the_chart_shows_its_figure_in_the_themes_colours() -> None:
    """What the chart's lines show is its figure's rows, cell for cell, each run in its
    colour on the theme's surface, for every theme, both axis scales and an empty chart."""
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        width, height = chart.size
        drawn = chart.effect
        assert drawn is not None
        for theme in app.theme_names:
            app.theme = theme
            await settle(pilot)
            variables = app.theme_variables
            surface = Color.parse(variables["surface"]).rgb
            text_colour = Color.parse(variables["foreground"]).rgb
            for log_y, effect in ((False, drawn), (True, drawn), (False, None)):
                chart.log_y = log_y
                chart.effect = effect
                lines = [chart.render_line(y) for y in range(height)]
                rows = chart.figure.rows(width, height)
                assert [line.text for line in lines] == [
                    "".join(text for text, _ in runs) for runs in rows]
                for line, runs in zip(lines, rows, strict=True):
                    shown = [(s.text, _rgb(s.style.color), _rgb(s.style.bgcolor))
                             for s in line]
                    assert shown == [(text, colour or text_colour, surface)
                                     for text, colour in runs], (theme, log_y)
                colours = {colour for runs in rows for _, colour in runs}
                if effect is not None:  # curves, markers and axes each in their colours
                    assert len(colours) > 3, (theme, log_y)


async def test_a_theme_switch_redraws_the_chart_in_the_new_colours() -> None:
    """Textual learns a theme's name before its colours: a chart drawn in between must
    not keep the old colours once the new ones are in."""
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        height = chart.size.height
        for theme in [*app.theme_names[1:], app.theme_names[0]]:
            before = _cells([chart.render_line(y) for y in range(height)])
            app.theme = theme
            chart.render_line(0)
            await settle(pilot)
            lines = _cells([chart.render_line(y) for y in range(height)])
            chart._lines.forget()
            assert lines == _cells([chart.render_line(y) for y in range(height)]), theme
            assert lines != before, theme


async def test_the_sparklines_draw_what_textual_would() -> None:
    """The sparklines lay their bars out themselves: on Textual's scale (the LR's), the
    same cells as Textual's own Sparkline, in every theme, for a history, a flat one and
    none; the Efficiency pane's on theirs (samples/s from zero, GPU busy on 0-100 %),
    where a steady level is drawn at its height."""
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        bars = list(app.screen.query(SparkBars))
        assert len(bars) == 3  # the Effect pane's LR, the Efficiency pane's two
        assert [b.scale for b in bars] == [DATA_RANGE, FROM_ZERO, PERCENT]
        history = list(bars[0].data or [])
        assert len(set(history)) > 2
        lr, throughput, busy = bars
        for theme in app.theme_names:
            app.theme = theme
            await settle(pilot)
            for data in (history, [3.0] * 40, [1.0, 5.0], []):
                lr.data = data
                width, height = lr.size
                shown = [lr.render_line(y) for y in range(height)]
                textual = Visual.to_strips(lr, visualize(lr, lr.render()), width,
                                           height, lr.visual_style)
                assert _cells(shown) == _cells(textual), (theme, data)
                if data is history:  # bars of several heights, each in its colour
                    assert len({cell[:2] for cell in _cells(shown)[0]}) > 2
            for line, data, bar in ((busy, [95.5] * 40, "▇"), (busy, [0.0] * 40, "▁"),
                                    (busy, [100.0] * 40, "█"), (throughput, [3.0] * 40, "█")):
                line.data = data
                (row,) = [line.render_line(y) for y in range(line.size.height)]
                assert row.text == bar * line.size.width, (theme, data)


async def test_gauges_and_the_progress_bar_repaint_only_when_what_they_show_changes() -> None:
    first = demo_snapshot()
    app = make_app(StaticSource(first))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        gauge = app.screen.query_one("#gauge-busy", Gauge)
        bar = app.screen.query_one("#progress-bar", ProgressBar)
        drawn: list[str] = []
        for widget in (gauge, bar.query_one(Bar)):
            render = widget.render
            widget.render = (  # type: ignore[method-assign]
                lambda w=widget, r=render: drawn.append(w.id or "bar") or r())
        busy, percent = first.efficiency.gpu_busy, first.progress.percent
        assert busy is not None and percent is not None
        # Moves in digits neither shows: nothing is drawn again.
        await _show(pilot, dataclasses.replace(
            first, efficiency=dataclasses.replace(first.efficiency, gpu_busy=busy + 0.001),
            progress=dataclasses.replace(first.progress, percent=percent + 0.001)))
        assert drawn == []
        # Moves that show: each is drawn again, with its new reading.
        await _show(pilot, dataclasses.replace(
            first, efficiency=dataclasses.replace(first.efficiency, gpu_busy=busy - 20),
            progress=dataclasses.replace(first.progress, percent=percent + 10)))
        assert sorted(set(drawn)) == ["bar", "gauge-busy"]
        assert fmt.percent(busy - 20, 1) in text(app, "#gauge-busy")
        assert bar.percentage is not None
        assert abs(bar.percentage * 100 - (percent + 10)) < 0.05
