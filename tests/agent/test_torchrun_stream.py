"""End to end on one host: a real torchrun of the example trainer under the daemon, read
back through `cockpit-agent stream` as the cockpit would."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 8


def test_train_records_from_both_ranks_arrive_on_stream(tmp_path: Path, procs) -> None:
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    state, run = tmp_path / "state", tmp_path / "run"
    daemon = procs(
        "run", "--state-dir", str(state), "--run-dir", str(run), "--simulate-gpus", "2",
        "--interval", "0.5", "--job", "e2e", "--",
        str(torchrun), "--standalone", "--nproc-per-node", "2",
        str(REPO / "examples" / "charlm" / "train.py"),
        "--config", str(REPO / "examples" / "charlm" / "config.toml"),
        "--max-steps", str(STEPS), "--set", f"data.dir={tmp_path / 'data'}",
        "--set", "data.max_bytes=200000", "--set", "eval.windows=8",
        "--set", "eval.every=4")
    stream = procs("stream", "--state-dir", str(state), "--from", "0",
                   stdin=subprocess.PIPE).popen
    records: list[dict] = []
    deadline = time.monotonic() + 50
    while time.monotonic() < deadline:
        line = stream.stdout.readline()
        assert line, "stream ended early"
        records.append(json.loads(line))
        if records[-1].get("kind") == "job_exited":
            break
    header, body = records[0], records[1:]
    assert header["t"] == "stream"
    exited = body[-1]
    assert exited.get("kind") == "job_exited", "the job did not finish in time"
    assert exited["data"]["returncode"] == 0, [r["line"] for r in body if r["t"] == "log"]
    seqs = [r["seq"] for r in body]
    assert seqs == list(range(1, len(body) + 1))  # strictly increasing, no gap
    for rank in (0, 1):
        steps = [r["step"] for r in body if r["t"] == "train" and r["rank"] == rank]
        assert len(steps) == STEPS and steps == sorted(steps), f"rank {rank}: {steps}"
        assert all(r["job"] == "e2e" for r in body if r["t"] == "train")
    ranks_seen = {p["rank"] for r in body if r["t"] == "host" for p in r["procs"]}
    assert {0, 1} <= ranks_seen  # the samplers knew which pid was which rank
    stream.stdin.close()
    assert stream.wait(10) == 0
    assert daemon.terminate() == 0
