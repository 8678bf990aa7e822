"""The job-wide restart budget per cause through the real agent and torchrun: a trainer
killed after each attempt's first steps is restarted while its `killed` budget lasts,
then stopped with an alert that says which budget it spent, and the cockpit shows the
budget used and left in the Health pane's interruptions and in the report."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader

from .conftest import REPO, AgentDaemon

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(120)]

KILLED_EVERY_TIME = """
import os, signal, time
from agent.hook import Reporter
rep = Reporter(flush_interval=0.05)
for step in range(1, 4):
    time.sleep(0.05)
    rep.step(step, loss=1.0 / step)
rep.flush()
time.sleep(0.3)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_spent_budget_for_a_cause_stops_the_job_and_the_cockpit_shows_it(
    tmp_path: Path, agent_daemon: AgentDaemon
) -> None:
    d = agent_daemon
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(KILLED_EVERY_TIME))
    spec = {"name": "loop", "python": sys.executable, "script": str(script),
            "nproc_per_node": 1, "run_dir": str(tmp_path / "runs" / "loop"),
            "env": {"PYTHONPATH": str(REPO)}, "stop_grace": 2,
            "recovery": {"restart_budget": 10, "backoff": 0.1, "backoff_max": 0.1,
                         "window": 3600, "per_cause": {"killed": 2}}}
    d.op("launch", spec=json.loads(json.dumps(spec)))
    alert = d.wait_for(lambda: next((r for r in d.records("alert")
                                     if r["code"] == "recovery_stopped"), None), 100,
                       "recovery to stop")  # fmt: skip
    decisions = [i["data"]["decision"] for i in d.events("interruption", "loop")]
    assert [i["data"]["cause"] for i in d.events("interruption", "loop")] == ["killed"] * 3
    assert [x["retry"] for x in decisions] == [True, True, False]
    assert [x["budget"]["used"] for x in decisions] == [1, 2, 3]
    assert all(x["budget"]["limit"] == 2 for x in decisions)
    assert decisions[-1]["reason"] == ("job-wide restart budget for killed spent: 3 "
                                       "failure(s) in 1 h, 2 allowed")
    assert "restart budget for killed spent" in alert["what"]
    (job,) = d.op("jobs")["jobs"]
    assert job["state"] == "failed" and job["restarts"] == 2
    with Store(tmp_path / "rec.duckdb") as store:
        journal = [r for r in d.records() if r["t"] != "stream"]
        store.ingest("local", b"".join(encode(r["t"], r["seq"], r, ts=r["ts"])
                                       for r in journal))
    with Store(tmp_path / "rec.duckdb", read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=None, label="REPLAY", job="loop")
    assert snap.progress.state == "failed"
    assert snap.health.restart_budget == ("killed: 3 of 2 in 1h 00m (0 left); all causes: "
                                          "3 of 10 (7 left), job-wide")
    report = render_report(tmp_path / "rec.duckdb")
    line = next(x for x in report.splitlines() if x.strip().startswith("restart budget"))
    assert "killed: 3 of 2 in 1h 00m (0 left)" in line
    assert any(a.code == "recovery_stopped" and "budget for killed spent" in a.what
               for a in snap.alerts)
