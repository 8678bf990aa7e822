"""A node that fails under a running job, on the real cluster.

An admin sets the job's node DOWN with a reason (`scontrol update nodename=… state=down
reason=…`), as after a dead PSU: slurmctld kills the job there. A job that may not be
requeued ends NODE_FAIL; the cockpit records the end and an interruption naming the
node and the reason, and the report shows both. A job that may (Slurm's default) is
requeued: the cockpit records a `slurm_requeue` interruption naming the node it ran on
and why it went down, the requeued job starts on the other node and resumes from the
newest checkpoint, and the watch streams that node too.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from cockpit.control.jobspec import parse_jobspec
from cockpit.control.slurm import PENDING, RUNNING, SlurmJob
from cockpit.control.slurm_watch import SlurmWatcher
from cockpit.read.report import render_report
from cockpit.store.database import Store
from cockpit.transport.run_command import LocalCommands
from tests.harness.slurm import SlurmCluster
from tests.slurm.conftest import tiny_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REASON = "cockpit test: PSU failed"
LIMIT_S = 120.0  # bounds a hang only


def _events(records: list[bytes], kind: str) -> list[dict[str, Any]]:
    return [json.loads(line)["data"] for chunk in records for line in chunk.splitlines()
            if b'"event"' in line and json.loads(line)["kind"] == kind]


def test_a_node_down_under_the_job_ends_it_node_fail_with_the_node_and_reason(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    text = tiny_spec(tmp_path, "nodefail", "nodefail", "import time\ntime.sleep(600)\n",
                     'extra_sbatch = ["--no-requeue"]\n', nodes=1)
    records: list[bytes] = []
    store = Store(tmp_path / "rec.duckdb")

    def emit(host: str, chunk: bytes) -> None:
        records.append(chunk)
        store.ingest(host, chunk)

    job = SlurmJob(parse_jobspec(text, "nodefail.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)), emit=emit)
    job.submit()
    bad = job.wait(lambda s: s.state == RUNNING, LIMIT_S).nodes
    assert bad in slurm.nodes, bad
    slurm.run("scontrol", "update", f"nodename={bad}", "state=down", f"reason={REASON}")
    try:
        ended = job.wait_ended(LIMIT_S)
        assert ended.state == "NODE_FAIL" and ended.nodes == bad, ended
        finished = _events(records, "slurm_finished")
        assert [(f["state"], f["exit_source"]) for f in finished] == [
            ("NODE_FAIL", "scontrol")], finished
        (cause,) = _events(records, "interruption")
        assert cause["cause"] == "slurm_node_fail" and cause["nodes"] == bad, cause
        assert cause["failed_nodes"] == [{"node": bad, "state": "down", "reason": REASON}]
        assert slurm.queue() == []
    finally:
        slurm.run("scontrol", "update", f"nodename={bad}", "state=resume")
        store.close()
    report = render_report(tmp_path / "rec.duckdb", fmt="text")
    assert "NODE_FAIL" in report and f"node {bad} down: {REASON}" in report, report
    data = json.loads(render_report(tmp_path / "rec.duckdb", fmt="json"))
    assert data["slurm"]["current"]["state"] == "NODE_FAIL", data["slurm"]
    assert [c["cause"] for c in data["slurm"]["causes"]] == ["slurm_node_fail"]


def test_a_node_down_under_the_job_requeues_it_onto_another_node_from_the_checkpoint(
        slurm: SlurmCluster, tmp_path: Path) -> None:
    text = tiny_spec(tmp_path, "requeue", "requeue", textwrap.dedent("""\
        import os, sys, time
        from pathlib import Path
        from agent.wire.checkpoints import mark_complete
        if "--resume" in sys.argv:
            print("resumed from", sys.argv[sys.argv.index("--resume") + 1], flush=True)
        else:
            folder = Path(os.environ["COCKPIT_CHECKPOINT_DIR"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "step-5.pt").write_bytes(b"weights")
            mark_complete(folder / "step-5.pt", 5)
        time.sleep(600)
    """), tables='[resume]\nargs = ["--resume", "{checkpoint}"]\n', nodes=1)
    records: list[bytes] = []
    job = SlurmJob(parse_jobspec(text, "requeue.toml"), LocalCommands(slurm.env, cwd=str(
        tmp_path)), emit=lambda host, chunk: records.append(chunk))
    told: list[tuple[str, ...]] = []
    watcher = SlurmWatcher(job, told.append)  # looked by hand: no thread
    job.submit()
    bad = job.wait(lambda s: s.state == RUNNING, LIMIT_S).nodes
    watcher.look_once()
    assert told == [(bad,)]
    run_dir = tmp_path / "runs" / "requeue"
    marker = run_dir / "checkpoints" / "step-5.pt.done"
    job.wait(lambda s: marker.exists(), LIMIT_S)
    slurm.run("scontrol", "update", f"nodename={bad}", "state=down", f"reason={REASON}")
    try:
        requeued = job.wait(lambda s: s.restarts == 1 and s.state == PENDING, LIMIT_S)
        (cause,) = _events(records, "interruption")
        assert cause["cause"] == "slurm_requeue" and cause["previous_nodes"] == bad, cause
        assert cause["failed_nodes"] == [{"node": bad, "state": "down", "reason": REASON}]
        pending = _events(records, "slurm_pending")[-1]
        assert {"node": bad, "state": "down", "reason": REASON} in pending["unavailable"]
        # Slurm holds a requeued job ~120 s (BeginTime); the test does not wait that out.
        assert requeued.reason == "BeginTime" or requeued.estimate, requeued
        slurm.run("scontrol", "update", f"jobid={job.job_id}", "starttime=now")
        again = job.wait(lambda s: s.state == RUNNING, LIMIT_S)
        assert again.nodes not in ("", bad), again
        assert again.restarts == 1
        watcher.look_once()
        assert told == [(bad,), (again.nodes,)]  # the new node streamed too

        def resumed() -> bool:
            return any(f"resumed from {marker.with_suffix('')}" in p.read_text()
                       for p in (run_dir / "nodes" / again.nodes).glob("logs/*.out"))

        job.wait(lambda s: resumed(), LIMIT_S)
        job.stop()
    finally:
        slurm.run("scontrol", "update", f"nodename={bad}", "state=resume")
    assert slurm.queue() == []
