"""Sizes and themes: usable at 80 × 24 and 250 × 70, resizing never crashes, and every
theme draws the same screen."""

from __future__ import annotations

import pytest

from cockpit.ui.app_factory import make_app
from cockpit.ui.static_source import StaticSource
from cockpit.ui.widgets.pane import Pane
from tests.ui.helpers import settle


def shown(pane: Pane, part: str) -> bool:
    return pane.query_one(part).display and pane.display


async def test_narrow_terminal_collapses_panes_to_summaries(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.has_class("-narrow")
        panes = {p.id: p for p in screen.query(Pane)}
        await pilot.press("3")
        await pilot.pause()
        assert shown(panes["efficiency"], ".body")
        for other in ("progress", "effect", "health"):
            assert not shown(panes[other], ".body") and shown(panes[other], ".summary")
            assert panes[other].region.height == 1
        assert "2 host(s) failing" in str(panes["health"].query_one(".summary").render())
        assert all(p.region.bottom <= 23 for p in panes.values())  # all above the footer


async def test_resizing_back_and_forth_keeps_the_screen_whole(
        demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(250, 70)) as pilot:
        await settle(pilot)
        assert app.screen.has_class("-wide")
        for size in [(80, 24), (60, 15), (160, 48), (80, 24)]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
        assert app.screen.has_class("-narrow")
        await pilot.resize_terminal(250, 70)
        await pilot.pause()
        panes = list(app.screen.query(Pane))
        assert all(shown(p, ".body") for p in panes)
        assert all(p.region.width >= 120 for p in panes)  # two columns of 250
        await pilot.press("h")
        await settle(pilot)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert type(app.screen).__name__ == "HostDetailScreen"


async def wait_ready(pilot) -> None:
    await settle(pilot)


@pytest.mark.parametrize("theme", ["dark", "light", "high-contrast"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(snap_compare, theme: str, size: tuple[int, int]) -> None:
    from cockpit.ui.demo_static import demo_source

    app = make_app(demo_source(), theme=theme)
    assert snap_compare(app, terminal_size=size, run_before=wait_ready)
