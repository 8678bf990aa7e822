"""`x` in Alerts acknowledges the active alerts shown: they stay listed, marked, and
leave the header's count; resolved ones (an interruption recovered from) say so."""

from __future__ import annotations

import dataclasses

from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import Alert
from cockpit.ui.app_factory import make_app
from cockpit.ui.demo_static import demo_details, demo_snapshot
from cockpit.ui.screens.alerts import AlertsScreen
from tests.ui.helpers import notifications, settle, text

RECOVERED = Alert(ts=demo_snapshot().ts - 50, kind="resource", severity="warning",
                  code="interrupted_killed", where="host gpu-node-a / rank 1 / step 150",
                  what="the job stopped from a rank killed by a signal at step 150",
                  hint="check the host's kernel log", state="resolved",
                  last_seen=demo_snapshot().ts - 40)


async def test_acknowledging_marks_the_shown_alerts_and_clears_the_count() -> None:
    snap = demo_snapshot()
    snap = dataclasses.replace(snap, alerts=(*snap.alerts, RECOVERED))
    active = [a for a in snap.alerts if a.state == "active"]
    app = make_app(StaticSource(snap, demo_details()))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        header = str(app.screen.query_one("#status-bar").render())
        assert f"{len(active)} alerts" in header  # the resolved one is not counted
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, AlertsScreen)
        listed = text(app, "#alerts-list")
        assert "RESOLVED" in listed and "interrupted_killed" in listed
        assert "ACKNOWLEDGED" not in listed
        await pilot.press("x")
        await settle(pilot)
        listed = text(app, "#alerts-list")
        assert listed.count("ACKNOWLEDGED") == len(active)
        assert f"acknowledged {len(active)} alerts" in notifications(app)
        await pilot.press("escape")
        await settle(pilot)
        assert "0 alerts" in str(app.screen.query_one("#status-bar").render())


def test_the_header_says_how_a_shown_job_ended_beside_the_training_count() -> None:
    from cockpit.ui.widgets.status_bar import job_place

    snap = demo_snapshot()
    ended = dataclasses.replace(snap, jobs=("a", "b", snap.job), jobs_training=("a",),
                                progress=dataclasses.replace(snap.progress, state="finished"))
    assert "(finished; 1 of 3 jobs training)" in job_place(ended)
    idle = dataclasses.replace(ended, progress=dataclasses.replace(snap.progress,
                                                                   state="unknown"))
    assert "(not training; 1 of 3 jobs training)" in job_place(idle)
