"""A few hosts' GPUs, one column each under their host's line: utilisation, memory,
temperature and power, in as many lines as the Health pane has room for, and none where
the map has no room to spare (a fleet)."""

from __future__ import annotations

import dataclasses

from textual.geometry import Size

from cockpit.analysis import gpu_state as gs
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import GpuCell, HostHealth
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.widgets.gpu_grid import FIGURES, gpu_figures
from cockpit.ui.widgets.gpu_map import GpuMap
from cockpit.ui.widgets.health_pane import HealthPane
from cockpit.ui.widgets.interruption_log import InterruptionLog
from cockpit.ui.widgets.map_text import FRAME_LINES, draw, figure_lines, fleet_view
from tests.ui import fleet
from tests.ui.helpers import settle


def _host() -> HostHealth:
    well = GpuCell(index=0, online=True, simulated=False, util=97.0, temp=71.0, power=612.4,
                   mem_used=60, mem_total=80)
    hot = well._replace(index=1, util=40.0, temp=93.0, throttle=0x20)
    gone = well._replace(index=2, online=False)
    return HostHealth(host="node-a", state="streaming", gpu_state="ok",
                      gpus=(well, hot, gone))


def test_each_gpu_is_a_column_of_its_figures_in_its_state_colour() -> None:
    host = _host()
    states = gs.gpu_states(host)
    lines = gpu_figures(host, states, len(FIGURES))
    assert [line.plain.split() for line in lines] == [
        ["gpu", f"{states[0].glyph}0", f"{states[1].glyph}1", f"{states[2].glyph}2"],
        ["util", "%", "97", "40", "–"],
        ["mem", "%", "75", "75", "–"],  # an offline GPU's last figures are not current
        ["temp", "°C", "71", "93", "–"],
        ["power", "W", "612", "612", "–"],
    ]
    temp = lines[3]
    hot_at = temp.plain.index("93")
    assert {str(s.style) for s in temp.spans if s.start <= hot_at < s.end} == {"$warning"}
    # Fewer lines where the room is short; none asked, none drawn.
    assert len(gpu_figures(host, states, 1)) == 2
    assert gpu_figures(host, states, 0) == []


def test_the_hosts_share_the_room_left_after_their_lines_the_frame_and_the_reserve() -> None:
    assert figure_lines(2, Size(76, 21), reserve=4) == len(FIGURES)  # (21-4-4-2)//2 - 1
    assert figure_lines(4, Size(76, 21), reserve=4) == 1
    assert figure_lines(4, Size(76, 19), reserve=4) == 0  # a header alone is no use
    assert figure_lines(0, Size(76, 21), reserve=0) == 0
    assert figure_lines(fleet.HOSTS, Size(160, 200), reserve=0) == 0


def test_a_click_on_a_hosts_figures_is_a_click_on_the_host() -> None:
    hosts = demo_snapshot().health.hosts[:2]
    view = fleet_view(hosts)
    drawing = draw(view, view.rows, Size(76, 4 + 2 + 2 * 5), None, "")
    assert drawing.mode == "list" and drawing.height == FRAME_LINES + 2 * (1 + 1 + 4)
    names = [spans[0][2] for _, spans in sorted(drawing.hits.items())]
    assert names == [view.rows[0].name] * 6 + [view.rows[1].name] * 6


async def test_the_pane_gives_the_figures_its_spare_lines_and_keeps_the_log_in_view() -> None:
    snapshot = demo_snapshot()
    app = make_app(StaticSource(snapshot))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        pane = app.screen.query_one(HealthPane)
        gpu_map = pane.query_one(GpuMap)
        log = pane.query_one(InterruptionLog)
        scroll = pane.query_one("#health-scroll")
        assert gpu_map._drawing is not None and gpu_map._drawing.mode == "list"
        assert "util %" in gpu_map._drawing.content.plain
        assert log.region.bottom <= scroll.content_region.bottom  # the log not scrolled away
        # A longer log takes lines back from the figures.
        before = gpu_map._drawing.height
        more = dataclasses.replace(snapshot.health, interruptions=snapshot.health.interruptions * 5)
        app.main_screen.snapshot = dataclasses.replace(snapshot, health=more, ts=snapshot.ts + 1)
        await settle(pilot)
        assert gpu_map._drawing.height < before
        assert log.region.bottom <= scroll.content_region.bottom
        # The pane maximised: more figures for the same hosts.
        app.main_screen.snapshot = snapshot
        pane.focus()
        await pilot.press("m")
        await settle(pilot)
        assert gpu_map._drawing.height > before
        assert "power W" in gpu_map._drawing.content.plain
        assert log.region.bottom <= scroll.content_region.bottom
