"""The Progress pane shares the lines under its text among the rank table, the
throughput chart and the stages band: each part is shown whole or not at all, never a
chart's heading with its chart out of sight or a band cut in half, and the lines left
go to the table."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from cockpit.analysis import timeline
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import StageSpan
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.widgets.progress_pane import (
    BAND_LINES,
    CHART_LINES,
    OTHER_STAGE,
    RANK_ROWS_MAX,
    STAGE_STYLES,
    ProgressPane,
    Share,
    allot,
    band_text,
)
from cockpit.ui.widgets.throughput_chart import ThroughputChart
from tests.ui.helpers import settle


def test_the_table_then_the_chart_then_the_band_get_their_least() -> None:
    assert allot(2, 3) == Share(3, chart=False, band=False)  # the table is never cut
    assert allot(3 + BAND_LINES, 3) == Share(3, chart=False, band=True)
    assert allot(3 + CHART_LINES, 3) == Share(3, chart=True, band=False)
    assert allot(3 + CHART_LINES + BAND_LINES, 3) == Share(3, chart=True, band=True)


def test_the_lines_left_widen_the_table_as_far_as_the_chart_leaves_it() -> None:
    full = CHART_LINES + BAND_LINES
    assert allot(3 + full + 2, 3) == Share(5, chart=True, band=True)
    # With the chart shown the table stops at RANK_ROWS_MAX; the chart takes the rest.
    assert allot(3 + full + 40, 3) == Share(RANK_ROWS_MAX, chart=True, band=True)
    # Without it (no room for it at its least) the table takes what the band leaves.
    assert allot(3 + BAND_LINES + 4, 3) == Share(7, chart=False, band=True)
    # A table shorter than the usual least (a job of one rank) leaves its lines too.
    assert allot(2 + full, 2) == Share(2, chart=True, band=True)


def test_each_stage_has_its_style_and_one_without_shows_as_another_stage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The band's styles are the timeline's stages (`STAGES`), each with a glyph of its
    own; a stage added there before it has a style here shows, not raises."""
    assert set(STAGE_STYLES) == set(timeline.STAGES)
    assert len({glyph for glyph, _ in STAGE_STYLES.values()} | {OTHER_STAGE[0]}) == len(
        STAGE_STYLES) + 1
    spans = (StageSpan(0.0, 10.0, timeline.TRAIN_STAGE), StageSpan(10.0, 20.0, "warm-up"))
    monkeypatch.setattr("cockpit.ui.widgets.progress_pane.STAGES",
                        (*timeline.STAGES, "warm-up"))
    text = band_text(spans, 20.0, 20).plain
    assert "warm-up" in text and OTHER_STAGE[0] in text


@pytest.mark.parametrize("size", [(160, 48), (140, 36), (120, 30), (100, 40), (80, 24)])
async def test_every_part_shown_is_whole_inside_the_pane(size: tuple[int, int]) -> None:
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(ProgressPane)
        body = pane.query_one(".body")
        heading = pane.query_one("#throughput-heading", Static)
        chart = pane.query_one(ThroughputChart)
        band = pane.query_one("#progress-stages", Static)
        assert heading.display == chart.display
        shown = [w for w in body.children if w.display]
        for widget in shown:
            assert widget.region.bottom <= body.content_region.bottom, (size, widget.id)
        if chart.display:  # at its least height, its heading on one line
            assert chart.size.height >= CHART_LINES - 1 and heading.size.height == 1
        if band.display:
            assert band.size.height == BAND_LINES
        # No line is left empty while the table has hosts it does not show.
        table = pane.query_one("#progress-ranks", Static)
        if "more hosts" in str(table.content):
            assert shown[-1].region.bottom == body.content_region.bottom, size
        assert band.display, size  # the demo's panes all have room for the band


async def test_a_short_pane_shows_the_band_and_not_a_heading_without_its_chart() -> None:
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(ProgressPane)
        assert not pane.query_one(ThroughputChart).display
        assert not pane.query_one("#throughput-heading", Static).display
        assert pane.query_one("#progress-stages", Static).display
        # Maximised, the pane has room for all of it.
        pane.focus()
        await pilot.press("m")
        await settle(pilot)
        assert pane.query_one(ThroughputChart).display
        assert pane.query_one("#throughput-heading", Static).display
