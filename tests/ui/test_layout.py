"""Sizes and themes: usable at 80 × 24 and 250 × 70, resizing never crashes, and every
theme draws the same screen.

Layout is checked on the replay of a recorded real run. The SVG snapshots draw the
static demo source instead: their pixels must not depend on the replay clock, the
store's bucketing or the date the run was recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.ui import format as fmt
from cockpit.ui.app_factory import make_app
from cockpit.ui.widgets.pane import Pane
from tests.ui.conftest import OpenReplay
from tests.ui.helpers import settle
from tests.ui.recorded import recording_facts

FACTS = recording_facts()


def shown(pane: Pane, part: str) -> bool:
    return pane.query_one(part).display and pane.display


async def test_narrow_terminal_collapses_panes_to_summaries(
        recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
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
        health = str(panes["health"].query_one(".summary").render())
        assert f"GPUs {FACTS.gpu_count}/{FACTS.gpu_count} online · ok" in health
        assert ("SIM" in health) == FACTS.simulated
        done = fmt.percent(100 * FACTS.last_step / FACTS.total_steps, 1)
        assert f"step {FACTS.last_step:,} · {done}" in str(
            panes["progress"].query_one(".summary").render())
        assert all(p.region.bottom <= 23 for p in panes.values())  # all above the footer


async def test_resizing_back_and_forth_keeps_the_screen_whole(
        recorded_replay: OpenReplay) -> None:
    app = make_app(recorded_replay())
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
        assert app.screen.host == FACTS.host


async def wait_ready(pilot) -> None:
    await settle(pilot)


@pytest.mark.parametrize("theme", ["dark", "light", "high-contrast"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(snap_compare, theme: str, size: tuple[int, int]) -> None:
    # The static demo source on purpose: a screenshot must be the same on every run.
    from cockpit.ui.demo_static import demo_source

    app = make_app(demo_source(), theme=theme)
    assert snap_compare(app, terminal_size=size, run_before=wait_ready)


@pytest.mark.parametrize("theme", ["dark", "light", "high-contrast"])
def test_readme_screenshots_are_the_checked_snapshots(theme: str) -> None:
    """The README shows the 160×48 snapshots: a change of the screen that updates them
    must update what a reader sees too (copy them to docs/screenshots)."""
    root = Path(__file__).resolve().parents[2]
    snapshot = (Path(__file__).parent / "__snapshots__" / "test_layout"
                / f"test_main_screen_snapshot[160x48-{theme}].svg")
    shot = root / "docs" / "screenshots" / f"main-{theme}.svg"
    assert shot.read_bytes() == snapshot.read_bytes(), f"copy {snapshot} to {shot}"
