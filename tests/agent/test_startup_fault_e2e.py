"""End to end on one host: a real torchrun whose rendezvous endpoint does not resolve,
started by the agent daemon and read back through `cockpit-agent stream` as the cockpit
would. The agent names the cause, with the fix, as an alert while torchrun still loops on
its lookups: long before the start-up hang limit, and before c10d's own connect timeout.
The operator's stop then ends the alert, read from the agent's own exit event.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.journal.control_inbox import append_op
from cockpit.analysis.alert_ends import operator_ends
from cockpit.analysis.alerts import stored_alerts

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The start-up hang limit the agent applies by default (agent.job.launch `hang.startup`).
STARTUP_WINDOW_S = 600.0
# How long the test waits: c10d gives the connect up after 60 s, so an alert that came
# only from that timeout (or from the job's end) would come too late to pass.
WAIT_S = 240.0


def test_an_unresolvable_rendezvous_endpoint_is_an_alert_with_the_fix(
        tmp_path: Path, procs) -> None:
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n",
                      encoding="utf-8")
    state, run = tmp_path / "state", tmp_path / "run"
    daemon = procs(
        "run", "--state-dir", str(state), "--run-dir", str(run), "--interval", "0.5",
        "--job", "rdzv", "--",
        str(torchrun), "--nnodes", "1", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "nonexistent-host.invalid:29400", str(script))
    stream = procs("stream", "--state-dir", str(state), "--from", "0",
                   stdin=subprocess.PIPE).popen
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in stream.stdout], daemon=True).start()
    records: list[dict] = []
    job_pid = None
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                break
            records.append(json.loads(line))
            rec = records[-1]
            if rec.get("kind") == "job_started":
                job_pid = rec["data"]["pid"]
            # The agent journals the alert, then an event with the line it read.
            if rec.get("kind") in ("startup_fault", "job_exited"):
                break
        alerts = [r for r in records if r.get("t") == "alert"]
        logs = [r["line"] for r in records if r.get("t") == "log"]
        assert len(alerts) == 1, records[-20:]
        alert = alerts[0]
        assert alert["code"] == "rdzv_unresolvable"
        assert alert["severity"] == "critical" and alert["job"] == "rdzv"
        assert alert["where"] == {"endpoint": "nonexistent-host.invalid:29400"}
        assert "does not resolve on this host" in alert["what"]
        assert "getent hosts nonexistent-host.invalid" in alert["hint"]
        # Read from the lookup failure itself, not from c10d giving up on the connect.
        assert not any("has timed out" in text for text in logs), logs
        started = next(r for r in records if r.get("kind") == "job_started")
        waited = alert["ts"] - started["ts"]
        assert 0 <= waited < STARTUP_WINDOW_S
        print(f"alert {waited:.1f} s after job_started")
        # The event that goes with it carries the line it was read from.
        event = records[-1]
        assert event.get("kind") == "startup_fault" and event["seq"] == alert["seq"] + 1
        assert "gai error: -2" in event["data"]["line"]
        # As the cockpit shows it: where (host, endpoint) and what to try.
        shown = stored_alerts([{**alert, "host": "gpu1"}])
        assert shown[0].where == "host gpu1 / endpoint nonexistent-host.invalid:29400"
        assert shown[0].hint == alert["hint"]

        # The operator stops the job: its start is no longer pending, and the alert is
        # over as the cockpit reads the agent's own exit event.
        append_op(state, {"op": "stop", "id": "stop-1", "_rx": time.time(), "job": "rdzv"})
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and records[-1].get("kind") != "job_exited":
            records.append(json.loads(lines.get(timeout=max(deadline - time.monotonic(),
                                                               0.1))))
        exited = records[-1]
        assert exited.get("kind") == "job_exited", records[-5:]
        events = [{**r, "host": "gpu1"} for r in records if r.get("t") == "event"]
        ends = operator_ends(events)
        assert ends.stopped == {"rdzv": exited["ts"]}
        assert stored_alerts([{**alert, "host": "gpu1"}], ends.started, ends.started_on,
                             stopped=ends.stopped, left=ends.left) == []
    finally:
        stream.stdin.close()
        if job_pid is not None:  # the job outlives its agent: end the torchrun it started
            try:
                os.killpg(job_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        daemon.terminate()
