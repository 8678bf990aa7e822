"""The main screen at fleet scale: 128 hosts × 8 simulated GPUs on the Health pane's map.

The SVG snapshots show the fleet all well, with one host throttled, one GPU with an
XID and one host unreachable, at 160 × 48 (a cell per GPU) and 80 × 24 (a cell per
host), in every theme. One app per theme draws all eight: the source is given the next
state and the terminal resized, as an operator's would be, so the screenshots also
check that a new snapshot and a resize redraw the map whole.

Then the map's keys: `/` filters by name or state, Enter opens the host under the
cursor, a click on a host's cells moves the cursor there.
"""

from __future__ import annotations

import dataclasses

import pytest
from pytest_textual_snapshot import SVGImageExtension
from syrupy.assertion import SnapshotAssertion
from textual.app import App
from textual.geometry import Size
from textual.widgets import Input

from cockpit.analysis import alert_config
from cockpit.analysis.gpu_state import GpuState
from cockpit.analysis.text import printable
from cockpit.sessions.static_source import StaticSource
from cockpit.ui.app_factory import make_app
from cockpit.ui.themes import load_themes
from cockpit.ui.widgets.gpu_map import GpuMap
from cockpit.ui.widgets.map_text import draw, fleet_view
from cockpit.ui.widgets.pane import Pane
from tests.ui import fleet
from tests.ui.helpers import settle, show

SIZES = {"160x48": (160, 48), "80x24": (80, 24)}
THEMES = load_themes().names()


@pytest.mark.parametrize("theme", THEMES)
async def test_fleet_screens(snapshot: SnapshotAssertion, theme: str) -> None:
    svg = snapshot.use_extension(SVGImageExtension)
    source = StaticSource(fleet.fleet_snapshot("healthy"))
    app = make_app(source, theme=theme)
    shots: dict[str, str] = {}
    async with app.run_test(size=SIZES["160x48"]) as pilot:
        await settle(pilot)
        await pilot.press("4")  # the Health pane: at 80 × 24 the only one with its body
        for size_name, size in SIZES.items():
            await pilot.resize_terminal(*size)
            for state in fleet.STATES:
                await show(pilot, source, fleet.fleet_snapshot(state))
                gpu_map = app.screen.query_one(GpuMap)
                assert gpu_map.view.gpus == fleet.HOSTS * fleet.GPUS
                expected = "gpus" if size_name == "160x48" else "hosts"
                assert gpu_map._drawing is not None and gpu_map._drawing.mode == expected
                shots[f"{state}-{size_name}"] = app.export_screenshot()
    for name, shot in shots.items():
        assert svg(name=name) == shot, f"{theme}: {name}"


@pytest.mark.parametrize("state", fleet.STATES)
async def test_the_narrow_summary_counts_what_the_map_shows(state: str) -> None:
    """At 80 × 24 the Health pane is its summary line, and it says what the map says: an
    unreachable host's GPUs are offline there too, whatever their last figures were."""
    app = make_app(StaticSource(fleet.fleet_snapshot(state)))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        pane = app.screen.query_one("#health", Pane)
        summary = str(pane.query_one(".summary").render())
        total = fleet.HOSTS * fleet.GPUS
        lost = fleet.GPUS if state == "offline" else 0
        assert f"128 hosts · GPUs {total - lost}/{total} online" in summary
        gpu_map = app.screen.query_one(GpuMap)
        offline = dict(gpu_map.view.counts).get(GpuState.OFFLINE, 0)
        assert offline == lost
        failing = {"healthy": 0, "throttled": 0, "xid": 1, "offline": 1}[state]
        assert ("1 host failing" if failing else "online · ok") in summary


def map_text(app: App) -> str:
    return app.screen.query_one(GpuMap).render().plain


async def test_filter_narrows_the_map_and_enter_opens_the_host() -> None:
    source = StaticSource(fleet.fleet_snapshot("xid"))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        gpu_map = app.screen.query_one(GpuMap)
        xid_host = fleet.host_name(fleet.XID_HOST)
        assert gpu_map.cursor == xid_host  # the worst host, before any key
        assert f"▶ {xid_host} ✖ gpu {fleet.XID_GPU} XID {fleet.XID}" in map_text(app)

        await pilot.press("slash", *"node-00")
        await settle(pilot)
        assert isinstance(app.focused, Input)
        shown = [row.name for row in gpu_map.shown]
        assert shown == [fleet.host_name(i) for i in range(10)]  # by name, worst first
        assert "filter node-00: 10 shown" in map_text(app)
        assert gpu_map._drawing is not None and gpu_map._drawing.mode == "list"
        await pilot.press("escape")  # clears what was typed
        await settle(pilot)
        assert len(gpu_map.shown) == fleet.HOSTS

        await pilot.press(*"xid", "enter")  # by state; Enter hands the keys back
        await settle(pilot)
        assert [row.name for row in gpu_map.shown] == [xid_host]
        assert not isinstance(app.focused, Input)
        await pilot.press("enter")
        await settle(pilot)
        assert type(app.screen).__name__ == "HostDetailScreen"
        assert app.screen.host == xid_host


async def test_arrows_and_clicks_move_the_cursor_which_stays_on_its_host() -> None:
    source = StaticSource(fleet.fleet_snapshot("offline"))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        gpu_map = app.screen.query_one(GpuMap)
        names = [row.name for row in gpu_map.shown]
        assert names[0] == fleet.host_name(fleet.OFFLINE_HOST)
        assert gpu_map.cursor == names[0]
        await pilot.press("right", "right", "down")
        per_line = gpu_map.per_line()
        assert per_line > 1
        assert gpu_map.cursor == names[2 + per_line]
        await pilot.press("left")
        chosen = names[1 + per_line]
        assert gpu_map.cursor == chosen
        # A new snapshot (the lost host is back) reorders the hosts: the cursor stays.
        await show(pilot, source, fleet.fleet_snapshot("healthy"))
        assert gpu_map.cursor == chosen
        # A click on the third host block of the map's first line moves the cursor there.
        drawing = gpu_map._drawing
        assert drawing is not None
        line = min(drawing.hits)
        start, _, third = drawing.hits[line][2]
        await pilot.click(GpuMap, offset=(start, line))
        await settle(pilot)
        assert gpu_map.cursor == third
        await pilot.click(GpuMap, offset=(start, line))  # again: open it
        await settle(pilot)
        assert type(app.screen).__name__ == "HostDetailScreen"
        assert app.screen.host == third


HOSTILE_NAME = "[@click=app.quit]x\x1b]0;PWNED\x07[/]"


def test_host_names_from_the_wire_are_drawn_as_text() -> None:
    """A host name is shown exactly as sent (controls made visible), styled only by the
    map, with no action or link: in the list form, the cursor line and the filter."""
    well = fleet.fleet_snapshot("healthy").health.hosts[0]
    hostile = dataclasses.replace(well, host=HOSTILE_NAME, state="unreachable")
    view = fleet_view((hostile, well))
    assert view.rows[0].name == HOSTILE_NAME  # unreachable: the worst, first
    for room in (Size(76, 20), Size(76, 5)):  # a line per host; a cell per host
        drawing = draw(view, view.rows, room, HOSTILE_NAME, HOSTILE_NAME)
        assert printable(HOSTILE_NAME) in drawing.content.plain
        for span in drawing.content.spans:
            assert "@click" not in str(span.style) and "link" not in str(span.style)


def test_the_densest_form_is_used_only_where_the_room_needs_it() -> None:
    view = fleet_view(fleet.fleet_snapshot("healthy").health.hosts)
    assert draw(view, view.rows, Size(76, fleet.HOSTS + 4), None, "").mode == "list"
    assert draw(view, view.rows, Size(76, 20), None, "").mode == "gpus"
    assert draw(view, view.rows, Size(76, 19), None, "").mode == "hosts"
    cells = draw(view, view.rows, Size(76, 19), None, "")
    per_line = 70  # 7 groups of 10 hosts and their 6 gaps: 76 columns
    assert max(len(spans) for spans in cells.hits.values()) == per_line
    assert cells.height == 4 + -(-fleet.HOSTS // per_line)


def test_the_resources_line_counts_high_and_full_hosts_and_names_the_fullest() -> None:
    hosts = fleet.fleet_snapshot("healthy").health.hosts
    total = hosts[5].disk_total
    assert total is not None
    full = dataclasses.replace(hosts[5], disk_used=int(total * 0.99))
    high = dataclasses.replace(hosts[6], disk_used=int(total * 0.92), cpu=None)
    view = fleet_view((full, high, *hosts[7:]))
    line = draw(view, view.rows, Size(160, 20), None, "").content.plain.splitlines()[-2]
    assert f"disk 1 full 1 high (max {full.host} 99%)" in line
    assert line.startswith("CPU ok ≤") and "RAM ok ≤" in line and "net max ↓" in line


def test_the_resources_line_grades_memory_and_disk_by_the_alert_thresholds() -> None:
    """An `[alerts]` file's memory and disk thresholds are the map's high and full."""
    hosts = fleet.fleet_snapshot("healthy").health.hosts
    mem_total, disk_total = hosts[5].mem_total, hosts[5].disk_total
    assert mem_total is not None and disk_total is not None
    pressed = dataclasses.replace(hosts[5], mem_used=int(mem_total * 0.85),
                                  disk_used=int(disk_total * 0.85))
    view = fleet_view((pressed, *hosts[6:]))
    line = draw(view, view.rows, Size(160, 20), None, "").content.plain.splitlines()[-2]
    assert "RAM ok ≤85%" in line and "disk ok ≤85%" in line
    alert_config.configure(dataclasses.replace(
        alert_config.AlertThresholds(), memory_warn=0.80, disk_warn=0.80, disk_critical=0.84))
    try:
        view = fleet_view((pressed, *hosts[6:]))
        line = draw(view, view.rows, Size(160, 20), None, "").content.plain.splitlines()[-2]
    finally:
        alert_config.configure(alert_config.AlertThresholds())
    assert f"RAM 1 high (max {pressed.host} 85%)" in line
    assert f"disk 1 full (max {pressed.host} 85%)" in line
    assert line.startswith("CPU ok ≤")
