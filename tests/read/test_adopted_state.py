"""A job adopted by a restarted agent reads as running only when the agent found it so."""

from __future__ import annotations

import json

from cockpit.source import _adopted_running


def test_an_adopted_job_that_still_runs_is_running() -> None:
    assert _adopted_running({"kind": "job_adopted", "data": json.dumps({"ok": True,
                                                                        "running": True})})
    assert _adopted_running({"kind": "job_adopted", "data": {"running": True}})


def test_an_unusable_or_ended_adoption_is_not_taken_for_running() -> None:
    assert not _adopted_running({"kind": "job_adopted", "data": json.dumps({"ok": False})})
    assert not _adopted_running({"kind": "job_adopted", "data": {"running": False}})
    assert not _adopted_running({"kind": "job_adopted", "data": "not json"})
    assert not _adopted_running({"kind": "job_adopted"})
