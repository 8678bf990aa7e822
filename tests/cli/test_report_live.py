"""`cockpit report` on a recording a running `cockpit demo` is writing: the report comes
from the live cockpit's copy of what it committed (docs/recordings.md), with no copy
by hand, and leaves neither the copy nor, once the demo ends, the socket behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

from cockpit.store.live_socket import socket_path
from tests.harness.job_hosts import SMALL_DEMO_PACED, demo_settings

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _report(recording: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", "report", str(recording), "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_report_reads_the_recording_a_running_demo_writes(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # the readers' private copies go here: left empty after
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)}
    recording = tmp_path / "demo" / "recording.duckdb"
    demo = subprocess.Popen(
        [sys.executable, "-m", "cockpit", "demo", "--headless", "600", "--steps", "100000",
         "--nproc", "1", "--fault-at", "0", "--dir", str(tmp_path / "demo"),
         *demo_settings(SMALL_DEMO_PACED)],
        cwd=REPO, env={**env, "TMPDIR": tempfile.gettempdir()},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    steps: list[int] = []
    try:
        deadline = time.monotonic() + 150
        while demo.poll() is None and time.monotonic() < deadline and len(steps) < 2:
            if not socket_path(recording).exists():
                time.sleep(0.5)
                continue
            done = _report(recording, env)
            assert "open for writing" not in done.stderr
            assert done.returncode == 0, done.stderr[-2000:]
            assert "is being written by a live cockpit" in done.stderr
            data = json.loads(done.stdout)
            assert data["recording"] == str(recording)
            step = data["progress"]["step"]
            if step is not None and (not steps or step > steps[-1]):
                steps.append(step)  # each report sees the steps committed since
            time.sleep(1.0)
        assert len(steps) == 2, f"reports while the demo ran saw steps {steps}"
        assert list(scratch.iterdir()) == [], "a reader's copy was left behind"
        demo.send_signal(signal.SIGHUP)
        demo.wait(120)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 128 + signal.SIGHUP, demo.stderr.read() if demo.stderr else ""
    assert not socket_path(recording).exists()
    # The live copies held committed steps: the recording, closed now, holds them too.
    con = duckdb.connect(str(recording), read_only=True)
    try:
        (newest,) = con.execute("SELECT max(step) FROM train").fetchone() or (None,)
    finally:
        con.close()
    assert newest is not None and newest >= steps[-1]
    after = _report(recording, env)  # no live cockpit now: the file itself
    assert "live cockpit" not in after.stderr and json.loads(after.stdout)["progress"]["step"]
