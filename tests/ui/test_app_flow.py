"""Data flow, panes and drill-down screens, driven through the keyboard with Pilot."""

from __future__ import annotations

import threading
import time

from textual.widgets import DataTable, Log

from cockpit.snapshot import Snapshot
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import HOSTS, T0, demo_details, demo_snapshot
from cockpit.ui.messages import DataArrived, DetailsReady, SnapshotReady
from cockpit.ui.refresh_gate import RefreshGate
from cockpit.ui.screens.alerts import AlertsScreen
from cockpit.ui.screens.host_detail import HostDetailScreen
from cockpit.ui.screens.log_tail import LogTailScreen
from cockpit.ui.screens.main import MainScreen
from cockpit.ui.screens.run_info import RunInfoScreen
from cockpit.ui.static_source import StaticSource
from cockpit.ui.widgets.detail_view import DetailView
from cockpit.ui.widgets.loss_chart import LossChart
from tests.ui.helpers import notifications, settle, text


async def test_snapshot_reaches_every_pane_and_the_header(demo_source: StaticSource) -> None:
    messages: list = []
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await settle(pilot)
        assert demo_source.started.is_set()
        assert any(isinstance(m, SnapshotReady) for m in messages)
        assert "step 12,000 / 50,000" in text(app, "#progress-position")
        assert "estimate" in text(app, "#progress-eta")
        assert "812 samples/s" in text(app, "#throughput")
        assert "r13@gpu-node-b" in text(app, "#stragglers")
        assert "diverging since step" in text(app, "#effect-warnings")
        grid = text(app, "#gpu-grid")
        assert all(host in grid for host in HOSTS)
        assert grid.index("gpu-node-b") < grid.index("gpu-node-a")  # failing hosts first
        assert "node failure" in text(app, "#interruptions")
        header = text(app, "#status-bar")
        assert "DEMO" in header and "demo-7b" in header and "1 critical" in header
        assert app.screen.query_one("#sim-badge").display
        assert app.screen.query_one(LossChart).effect == demo_source.snapshot().effect
    assert demo_source.stopped.is_set()


async def test_missing_fields_show_na_and_no_sim_badge() -> None:
    source = StaticSource(Snapshot(ts=T0, source_label="LIVE", job=None))
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "step n/a / n/a" in text(app, "#progress-position")
        assert "samples n/a · tokens n/a" in text(app, "#progress-counts")
        assert "ETA n/a" in text(app, "#progress-eta")
        assert "n/a" in text(app, "#gauge-mfu")
        assert "n/a samples/s" in text(app, "#throughput")
        assert "no hosts reported yet" in text(app, "#gpu-grid")
        assert "job n/a" in text(app, "#status-bar")
        assert not app.screen.query_one("#sim-badge").display
        assert not app.screen.query_one("#stall-banner").display


async def test_stall_banner_names_the_likely_cause() -> None:
    app = make_app(StaticSource(demo_snapshot(stalled=True)))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        banner = app.screen.query_one("#stall-banner")
        assert banner.display
        assert "STALLED: likely data starved" in text(app, "#stall-banner")


async def test_data_floods_are_merged_and_rate_limited(demo_source: StaticSource) -> None:
    messages: list = []
    app = make_app(demo_source)
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await settle(pilot)
        before = demo_source.snapshot_calls
        started = time.monotonic()
        flood = threading.Thread(target=lambda: [demo_source.notify() for _ in range(200)])
        flood.start()
        flood.join()
        spent = time.monotonic() - started
        await pilot.pause(RefreshGate.min_interval * 2)
        await settle(pilot)
        builds = demo_source.snapshot_calls - before
        delivered = sum(isinstance(m, DataArrived) for m in messages)
        assert 1 <= builds <= 2 + spent / RefreshGate.min_interval
        assert delivered < 200  # queued notices replaced each other


async def test_new_snapshot_replaces_the_old_one(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        demo_source.set_snapshot(demo_snapshot(stalled=True))
        await pilot.pause(RefreshGate.min_interval * 2)
        await settle(pilot)
        assert app.screen.query_one("#stall-banner").display


async def test_failing_snapshot_becomes_a_notification_not_a_crash() -> None:
    class Broken(StaticSource):
        def snapshot(self, buckets: int = 120) -> Snapshot:
            raise RuntimeError("recording is locked by another process")

    app = make_app(Broken(demo_snapshot()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "RuntimeError: recording is locked by another process" in notifications(app)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("1")  # still responsive
        assert app.screen.focused.id == "progress"


async def test_number_keys_focus_and_m_maximises(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        for key, pane in zip("4321", ("health", "efficiency", "effect", "progress"), strict=True):
            await pilot.press(key)
            assert app.screen.focused.id == pane
        await pilot.press("2", "m")
        assert app.screen.maximized is app.screen.query_one("#effect")
        await pilot.press("m")
        assert app.screen.maximized is None


async def test_g_toggles_logarithmic_loss_axis(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        chart = app.screen.query_one(LossChart)
        await pilot.press("g")
        assert chart.log_y and "log-y" in text(app, "#effect-line")
        await pilot.press("g")
        assert not chart.log_y and "linear-y" in text(app, "#effect-line")


async def test_host_detail_cycles_hosts_and_fetches_their_details(
        demo_source: StaticSource) -> None:
    messages: list = []
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48), message_hook=messages.append) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostDetailScreen)
        first = screen.host
        assert demo_source.details_calls[-1] == ("host", {"host": first})
        assert any(isinstance(m, DetailsReady) and m.what == "host" for m in messages)
        assert screen.query_one("#gpu-table", DataTable).row_count == 8
        tables = screen.query_one(DetailView).query(DataTable)
        assert any(t.row_count == 8 for t in tables)  # the processes table
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert screen.host != first
        assert demo_source.details_calls[-1] == ("host", {"host": screen.host})
        assert screen.host in text(app, "#screen-title")
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert screen.host == first
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_alerts_screen_shows_where_and_what_to_try_and_filters(
        demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AlertsScreen)
        shown = text(app, "#alerts-list")
        assert "where: host gpu-node-b / gpu 3 / rank 11" in shown
        assert "try:" in shown and "thermal" in shown.lower()
        assert "checkpoint saved" in text(app, "#events-list")
        await pilot.press("slash")
        await pilot.press(*"xid")
        await pilot.pause()
        filtered = text(app, "#alerts-list")
        assert "gpu-xid" in filtered and "thermal" not in filtered.lower()
        assert text(app, "#events-list") == "no events"


async def test_run_info_and_log_tail(demo_source: StaticSource) -> None:
    app = make_app(demo_source)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await settle(pilot)
        assert isinstance(app.screen, RunInfoScreen)
        cells = [str(c) for t in app.screen.query(DataTable) for row in range(t.row_count)
                 for c in t.get_row_at(row)]
        assert "corpus-v3" in cells and "model.layers" in cells
        await pilot.press("L")
        await settle(pilot)
        assert isinstance(app.screen, LogTailScreen)
        log = app.screen.query_one(Log)
        assert log.line_count == len(demo_details()["log"])
        await pilot.press("slash", *"WARNING")
        await pilot.pause()
        assert log.lines == ["[rank 3] WARNING: dataloader worker slow"]


async def test_details_failure_is_reported_on_the_screen_that_asked() -> None:
    class NoDetails(StaticSource):
        def details(self, what: str, **kw: object) -> object:
            raise ValueError(f"no host named {kw.get('host')!r} in this recording")

    app = make_app(NoDetails(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert isinstance(app.screen, HostDetailScreen)
        assert any("no host named" in n for n in notifications(app))
