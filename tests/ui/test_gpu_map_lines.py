"""The GPU map draws its text a line at a time and keeps each line's cells while the line
reads the same (`GpuMap.render_line`): the cells must be those Textual draws from the
whole text, in every form of the map, with a host name too long for its line, and in
every theme; and a line that changed must be drawn anew, not taken from what was kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from textual.geometry import Region
from textual.visual import Visual

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Snapshot
from cockpit.ui.app_factory import make_app
from cockpit.ui.themes import load_themes
from cockpit.ui.widgets.gpu_map import GpuMap
from tests.ui import fleet
from tests.ui.helpers import settle, show

# 160 x 48: a cell per GPU; 80 x 24: a cell per host; then, filtered to ten hosts, a
# line per host (one with a name longer than the line has room for).
SIZES = ((160, 48), (80, 24))


def _with_long_name(snapshot: Snapshot) -> Snapshot:
    hosts = list(snapshot.health.hosts)
    hosts[3] = dataclasses.replace(hosts[3], host=hosts[3].host + "n" * 300,
                                   state="unreachable")
    return dataclasses.replace(
        snapshot, health=dataclasses.replace(snapshot.health, hosts=tuple(hosts)))


def _assert_lines_as_whole(gpu_map: GpuMap) -> None:
    width, height = gpu_map.size
    assert width and height
    whole = Visual.to_strips(gpu_map, gpu_map.render(), width, height, gpu_map.visual_style)
    assert len(whole) == height
    for y in range(height):
        assert gpu_map.render_line(y) == whole[y], f"line {y} at {gpu_map.size}"


@pytest.mark.parametrize("theme", load_themes().names())
async def test_lines_drawn_one_by_one_are_the_whole_texts_cells(theme: str) -> None:
    source = StaticSource(_with_long_name(fleet.fleet_snapshot("xid")))
    app = make_app(source, theme=theme)
    async with app.run_test(size=SIZES[0]) as pilot:
        await settle(pilot)
        await pilot.press("4")
        gpu_map = app.screen.query_one(GpuMap)
        modes = set()
        for size in (*SIZES, None):
            if size is None:
                await pilot.press("slash", *"node-00", "enter")
            else:
                await pilot.resize_terminal(*size)
            for state in fleet.STATES:
                await show(pilot, source, _with_long_name(fleet.fleet_snapshot(state)))
                assert gpu_map._drawing is not None
                modes.add(gpu_map._drawing.mode)
                _assert_lines_as_whole(gpu_map)
        assert modes == {"gpus", "hosts", "list"}


async def test_a_changed_line_is_drawn_anew() -> None:
    source = StaticSource(fleet.fleet_snapshot("healthy"))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        gpu_map = app.screen.query_one(GpuMap)
        before = [gpu_map.render_line(y) for y in range(gpu_map.size.height)]
        await show(pilot, source, fleet.fleet_snapshot("throttled"))
        after = [gpu_map.render_line(y) for y in range(gpu_map.size.height)]
        assert before != after
        _assert_lines_as_whole(gpu_map)


async def test_a_new_snapshot_paints_again_the_lines_that_changed_and_only_those() -> None:
    """A new snapshot marks for painting only the map lines that read otherwise; what the
    screen shows then is what painting the whole map afresh shows, in each fleet state
    and back to the first."""
    source = StaticSource(fleet.fleet_snapshot(fleet.STATES[0]))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        gpu_map = app.screen.query_one(GpuMap)
        asked: list[tuple[Region, ...]] = []
        refresh = gpu_map.refresh

        def spy(*regions: Region, **kw: Any) -> GpuMap:
            asked.append(regions)
            return refresh(*regions, **kw)

        gpu_map.refresh = spy  # type: ignore[method-assign]
        partial = 0
        for state in (*fleet.STATES[1:], fleet.STATES[0]):
            asked.clear()
            await show(pilot, source, fleet.fleet_snapshot(state))
            crop = Region(0, 0, *gpu_map.size)
            painted = gpu_map.render_lines(crop)
            gpu_map._styles_cache.clear()
            assert painted == gpu_map.render_lines(crop), f"a stale map line in {state}"
            lines = [r for regions in asked for r in regions]
            if asked and all(regions for regions in asked):
                partial += 1
                assert all(r.height == 1 for r in lines)
                assert 0 < len({r.y for r in lines}) < gpu_map.size.height
        assert partial >= 2  # the transitions that keep the map's height
