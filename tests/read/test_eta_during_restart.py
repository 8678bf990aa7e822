"""The read side keeps the ETA band shown while a job restarts: the compute time left at
the speed the job had, the restarts its measured interruption rate predicts, and the rest
of the restart under way. On the synthetic recording (tests/read/synthetic.py): 401 steps
left at 1 s each, one earlier interruption that cost its outage (recovery_seconds) plus
10 recomputed steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from tests.read import synthetic as syn

LEFT = 1000 - 599  # steps left after the newest step, at 1 s a step
COST = (syn.OUTAGE_S - 5) + 10 * 1.0  # the earlier outage plus its recomputed steps


def _restarting(tmp_path: Path, *kinds: str) -> Path:
    """The recording, then a second interruption 1 s after the last step (and, after
    it, the `kinds` events: a relaunch)."""
    path = syn.write_recording(tmp_path / "r.duckdb")
    failed = syn.step_ts(syn.STEPS - 1) + 1
    lines = encode("event", 10**6, {
        "kind": "interruption", "job": "job-1", "rank": 1, "step": syn.STEPS - 1,
        "msg": "rank 1 exited", "data": {"cause": "nccl", "detected_at": failed,
                                         "detection_latency": 0.0,
                                         "decision": {"retry": True}}}, ts=failed)
    for i, kind in enumerate(kinds, start=1):
        lines += encode("event", 10**6 + i, {"kind": kind, "job": "job-1", "rank": None,
                                             "step": None, "msg": kind, "data": {}},
                        ts=failed + 10 * i)
    with Store(path) as store:
        store.ingest("node-a", lines)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("kinds", "state"), [((), "recovering"),
                                              (("job_started",), "starting")])
def test_the_band_is_shown_while_the_job_restarts(tmp_path: Path, kinds: tuple[str, ...],
                                                   state: str) -> None:
    path = _restarting(tmp_path, *kinds)
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY")
    p = snap.progress
    assert (p.state, p.eta_note) == (state, None)
    failed = syn.step_ts(syn.STEPS - 1) + 1
    ran = snap.ts - (syn.T0 + 5)  # two interruptions over the time the job has run
    rate = 2 / ran
    waited = snap.ts - failed  # into the restart: the rest of a 45 s one is still to come
    assert p.eta_seconds == pytest.approx(LEFT + rate * LEFT * COST + max(COST - waited, 0))
    assert p.eta_low is not None and p.eta_high is not None
    assert p.eta_low <= p.eta_seconds <= p.eta_high
    assert p.eta_high > LEFT + COST - waited  # the dearest restart prices the top
    report = render_report(path)
    assert "(estimate; " in report.split("ETA", 1)[1].splitlines()[0]
