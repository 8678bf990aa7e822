"""A job's state is its agent's, in the app and the report: a finished, a stopped and a
failed job each read as such, never "running" with an ETA of nothing left, even when an
operation the operator pressed as the job ended failed after its exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.sessions.replay import ReplaySource
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.ui.app_factory import make_app
from tests.read import synthetic as syn
from tests.ui.helpers import settle, text

STEPS = 60  # enough for a speed; the synthetic run's anomalies come later
GAVE_UP = {"cause": "user_code", "decision": {"retry": False, "reason": "failed twice"}}
# A `p` pressed as the job reached its last step: the agent's pause found the processes
# gone; its event (ok: false) comes after the job's exit.
LATE_PAUSE = {"mode": "checkpoint", "ok": False,
              "error": "its processes exited with code 0 after 1 s, before a checkpoint "
                       "was saved"}


def _ended(tmp_path: Path, *events: tuple[str, dict]) -> Path:
    """The synthetic recording, its total reached at its last step, then `events`
    (kind, data) of node-a, one second apart."""
    path = syn.write_recording(tmp_path / "r.duckdb", steps=STEPS)
    # After everything the synthetic run plants at fixed times (its recovery, alerts).
    last = max(syn.step_ts(STEPS - 1), syn.THROTTLE_FROM_TS + 10)
    lines = encode("run", 10**6, {"job": "job-1", "rank": 0,
                                  "total_steps": STEPS - 1}, ts=last + 0.5)
    for i, (kind, data) in enumerate(events, 1):
        lines += encode("event", 10**6 + i, {"kind": kind, "job": "job-1", "rank": None,
                                             "step": None, "msg": kind, "data": data},
                        ts=last + i)
    with Store(path) as store:
        store.ingest("node-a", lines)
    return path


CASES = {
    "finished": ([("job_exited", {"returncode": 0}), ("pause", LATE_PAUSE)], "finished"),
    "stopped": ([("job_exited", {"returncode": -15, "ended_for": "stop"})],
                "stopped on request"),
    "failed": ([("interruption", GAVE_UP)], "failed (node-a gave up after user_code: "
                                            "failed twice)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("state", sorted(CASES))
def test_the_state_is_the_agents_in_the_snapshot_and_the_report(
        tmp_path: Path, state: str) -> None:
    events, note = CASES[state]
    path = _ended(tmp_path, *events)
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    p = snap.progress
    assert (p.state, p.eta_note, p.eta_seconds, p.eta_low) == (state, note, None, None)
    assert "job-1" not in snap.jobs_training  # an ended job trains no more
    report = render_report(path)
    assert f"state         {state}\n" in report
    assert f"n/a (job {note})" in report
    assert "running" not in report.split("Effect")[0]


@pytest.mark.slow
def test_a_failed_operation_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    """A pause that failed while the job ran leaves it running (here with no step for
    minutes since: stalled), never paused."""
    path = _ended(tmp_path, ("pause", {**LATE_PAUSE, "error": "no checkpoint within 300 s"}))
    with Store(path, read_only=True) as store:
        assert build_snapshot(StoreReader(store), until_ts=None,
                              label="REPLAY").progress.state == "stalled"


@pytest.mark.parametrize("state", sorted(CASES))
async def test_the_app_shows_the_true_state(tmp_path: Path, state: str) -> None:
    events, note = CASES[state]
    source = ReplaySource(_ended(tmp_path, *events))
    source.seek_to(1.0)
    app = make_app(source)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot, 6)
            shown = text(app, "#progress-last") + text(app, "#progress-eta")
            assert f"state {state}" in shown, shown
            assert note in shown, shown
            assert "running" not in shown and "~0s" not in shown
    finally:
        source.stop()
