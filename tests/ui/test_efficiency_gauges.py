"""The Efficiency gauges are coloured by the level the snapshot carries (judged in the
core, `with_gauge_levels`), so an `[alerts]` file's data-wait threshold reaches the
data-wait gauge."""

from __future__ import annotations

from cockpit.sessions.static_source import StaticSource
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_snapshot
from cockpit.ui.widgets.gauge import Gauge
from tests.harness.thresholds import configure
from tests.ui.helpers import settle


async def _data_gauge_style() -> str:
    app = make_app(StaticSource(demo_snapshot()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        gauge = app.screen.query_one("#gauge-data", Gauge)
        shown = gauge.reading(gauge.shown)
        assert shown is not None
        return shown[1]


async def test_the_data_wait_gauge_follows_the_configured_alert_threshold(
        configured: None) -> None:
    assert demo_snapshot().efficiency.data_wait_pct == 7.5
    assert await _data_gauge_style() == "$warning"
    configure(data_wait_warn_pct=7.0)
    assert demo_snapshot().efficiency.data_wait_level == "bad"
    assert await _data_gauge_style() == "$error"
