"""The Efficiency pane's rank table: where each rank's step time goes, slowest first, in
the lines the pane has left, and no table where it has none."""

from __future__ import annotations

import dataclasses

from textual.content import Content
from textual.widgets import Static

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Efficiency, RankTime
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.widgets.efficiency_pane import EfficiencyPane, rank_times_text
from cockpit.ui.widgets.progress_pane import ranks_text
from tests.ui.helpers import settle


def _ranks(count: int) -> Efficiency:
    """`count` ranks, rank 0 the slowest by 30 %, the others even."""
    times = [RankTime(r, f"node-{r // 8}", 1.3 if r == 0 else 1.0, wall_time=1.5,
                      data_share=0.25 if r == 0 else 0.05, comm_share=0.1,
                      behind=0.3 if r == 0 else 0.0) for r in range(count)]
    return Efficiency(ranks=tuple(times), rank_count=count)


def test_the_slowest_rank_leads_with_its_shares_and_how_far_behind_it_is() -> None:
    lines = rank_times_text(_ranks(4), 10).plain.split("\n")
    assert lines[0].split() == ["rank", "host", "step", "own", "data", "comm", "behind"]
    assert lines[1].split() == ["r0", "node-0", "1.500s", "1.300s", "25%", "10%", "+30%"]
    assert lines[2].split() == ["r1", "node-0", "1.500s", "1.000s", "5%", "10%", "+0%"]
    assert len(lines) == 5  # every rank fits: no line about more


def test_ranks_beyond_the_lines_are_counted_not_drawn() -> None:
    lines = rank_times_text(_ranks(16), 5).plain.split("\n")
    assert len(lines) == 5
    assert [line.split()[0] for line in lines[1:4]] == ["r0", "r1", "r2"]
    assert lines[4] == "+13 more ranks, none slower"
    # A snapshot keeps the slowest few of a large job: the rest are counted too.
    kept = dataclasses.replace(_ranks(16), rank_count=1024)
    assert rank_times_text(kept, 30).plain.split("\n")[-1] == "+1008 more ranks, none slower"
    # Every kept rank would fit under the header, but the line about the rest would not:
    # the table keeps to its lines.
    for lines in (16, 17, 18):
        assert len(rank_times_text(kept, lines).plain.split("\n")) == lines


def _styles_at(content: Content, at: int) -> set[str]:
    return {str(s.style) for s in content.spans if s.start <= at < s.end}


def test_a_rank_far_behind_is_a_warning_and_even_ranks_are_muted() -> None:
    content = rank_times_text(_ranks(2), 10)
    plain = content.plain
    slow = plain.index("+30%")
    assert "$warning" in _styles_at(content, slow)
    assert "$text-muted" in _styles_at(content, plain.index("+0%", slow))
    assert not _styles_at(content, plain.index("node-0"))  # a host is text, unstyled


def test_no_ranks_says_so() -> None:
    assert rank_times_text(Efficiency(), 10).plain == "no rank has timed a step yet"


async def test_the_table_takes_the_lines_the_pane_has_left_and_more_when_maximised() -> None:
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(EfficiencyPane)
        table = pane.query_one("#rank-times", Static)
        body = pane.query_one(".body")
        assert table.display
        shown = table.content_size.height
        assert shown >= 3
        # The whole body is used and none of it is cut off.
        assert table.region.bottom == body.content_region.bottom
        assert str(table.content).split("\n")[1].split()[0] == "r13"
        pane.focus()
        await pilot.press("m")
        await settle(pilot)
        # Every rank then fits, with room to spare.
        assert table.content_size.height == 1 + len(app.snapshot.efficiency.ranks) > shown
        assert table.region.bottom < body.content_region.bottom


async def test_no_table_where_the_pane_has_no_room() -> None:
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(EfficiencyPane)
        assert not pane.query_one("#rank-times", Static).display


def test_the_host_column_narrows_so_that_no_line_wraps() -> None:
    ranks = demo_snapshot().progress.ranks
    for width in (44, 56, 80):
        for table in (rank_times_text(_ranks(4), 6, width), ranks_text(ranks, 6, width)):
            lines = table.plain.split("\n")
            assert max(len(line) for line in lines[:-1]) <= max(width, 49), (width, lines)
    assert rank_times_text(_ranks(4), 6, 56).plain.split("\n")[1].split()[1] == "node-0"


def test_a_narrow_pane_drops_the_step_column_before_the_host_is_cut_short() -> None:
    wide = rank_times_text(_ranks(4), 6, 59).plain.split("\n")
    narrow = rank_times_text(_ranks(4), 6, 46).plain.split("\n")
    assert "step" in wide[0].split() and "step" not in narrow[0].split()
    # The own time, the shares and how far behind stay, the host whole, in the width.
    assert narrow[0].split() == ["rank", "host", "own", "data", "comm", "behind"]
    assert narrow[1].split() == ["r0", "node-0", "1.300s", "25%", "10%", "+30%"]
    assert max(len(line) for line in narrow) <= 46
