"""An event's `data` as the state of a job reads it: stored as JSON text or a dict."""

from __future__ import annotations

import json

from cockpit.analysis.lifecycle import event_data


def test_an_adopted_job_that_still_runs_is_running() -> None:
    for data in (json.dumps({"ok": True, "running": True}), {"running": True}):
        assert event_data({"kind": "job_adopted", "data": data}).get("running") is True


def test_an_unusable_or_ended_adoption_is_not_taken_for_running() -> None:
    for event in ({"kind": "job_adopted", "data": json.dumps({"ok": False})},
                  {"kind": "job_adopted", "data": {"running": False}},
                  {"kind": "job_adopted", "data": "not json"},
                  {"kind": "job_adopted", "data": "[1, 2]"},
                  {"kind": "job_adopted"}):
        assert event_data(event).get("running") is not True, event
