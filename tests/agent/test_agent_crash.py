"""kill -9 of the daemon at arbitrary moments: nothing lost, nothing twice (real processes)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.lockfile import running_daemon
from tests.harness.waiting import wait_for

from .conftest import dump_journal

pytestmark = pytest.mark.slow

STEPS = 400

# A trainer stand-in that follows the spool contract: two ranks, a new file every 60
# records (as at a process restart or the 64 MiB rotation), a line every ~2 ms, and now
# and then a line written in two parts, as a real writer may be caught mid-line.
WRITER = textwrap.dedent(
    """
    import json, os, secrets, sys, time
    run, steps = sys.argv[1], int(sys.argv[2])
    spool = os.path.join(run, "spool", "crashjob")
    os.makedirs(spool, exist_ok=True)
    files = {}
    def new_file(rank):
        fid = secrets.token_hex(8)
        f = open(os.path.join(spool, "rank-%d.%s.ndjson" % (rank, fid)), "a")
        f.write(json.dumps({"t": "spool", "v": 1, "file_id": fid, "job": "crashjob",
                            "rank": rank, "pid": os.getpid(), "ts": time.time()}) + "\\n")
        f.flush()
        files[rank] = f
    for rank in (0, 1):
        new_file(rank)
    for step in range(steps):
        for rank in (0, 1):
            if step and step % 60 == 0:
                files[rank].close()
                new_file(rank)
            line = json.dumps({"t": "train", "step": step, "loss": 1.0, "ts": time.time(),
                               "step_time": 0.002}) + "\\n"
            if step % 7 == 0:
                files[rank].write(line[:10]); files[rank].flush(); time.sleep(0.001)
                files[rank].write(line[10:])
            else:
                files[rank].write(line)
            files[rank].flush()
        time.sleep(0.005)
    """
)


def _check_exactly_once(state: Path) -> list[dict]:
    records = dump_journal(state)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    for rank in (0, 1):
        steps = [r["step"] for r in records if r["t"] == "train" and r["rank"] == rank]
        assert steps == list(range(STEPS)), f"rank {rank}: lost or repeated steps"
    return records


def test_kill9_loop_neither_repeats_nor_skips_spool_records(tmp_path: Path, procs) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    run.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(run), str(STEPS)])
    rng = random.Random(1234)
    args = ("run", "--state-dir", str(state), "--run-dir", str(run), "--interval", "0.25",
            "--simulate-gpus", "1")
    try:
        for _ in range(6):
            daemon = procs(*args)
            time.sleep(rng.uniform(0.3, 0.9))
            daemon.kill9()
        daemon = procs(*args)

        def caught_up() -> bool:
            if writer.poll() is None:
                return False
            trains = [r for r in dump_journal(state) if r["t"] == "train"]
            return len(trains) >= 2 * STEPS

        wait_for(lambda: running_daemon(state) == daemon.popen.pid, what="daemon lock")
        wait_for(caught_up, timeout=40, what="all spool records journaled")
        assert daemon.terminate() == 0
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()
    records = _check_exactly_once(state)
    assert sum(r["t"] == "hello" for r in records) >= 2
    assert not [r for r in records if r.get("kind") == "spool_error"]


def _read_until(stream, predicate, timeout: float = 20.0) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.stdout.readline()
        if not line:
            break
        out.append(json.loads(line))
        if predicate(out[-1]):
            return out
    raise AssertionError(f"stream ended or timed out; got {len(out)} lines")


def test_stream_resumes_after_kill9_with_no_gap_and_no_repeat(tmp_path: Path, procs) -> None:
    state = tmp_path / "state"
    args = ("run", "--state-dir", str(state), "--interval", "0.25", "--simulate-gpus", "2")
    daemon = procs(*args)
    stream = procs("stream", "--state-dir", str(state), "--from", "0",
                   stdin=subprocess.PIPE).popen
    first = _read_until(stream, lambda r: r["seq"] >= 12)
    assert first[0]["t"] == "stream" and first[0]["from"] == 0
    assert [r["seq"] for r in first[1:]] == list(range(1, len(first)))
    journal_id = first[0]["journal_id"]
    daemon.kill9()
    stream.stdin.close()  # the SSH channel closes
    assert stream.wait(10) == 0
    last = first[-1]["seq"]

    daemon = procs(*args)
    stream = procs("stream", "--state-dir", str(state), "--from", str(last),
                   stdin=subprocess.PIPE).popen
    second = _read_until(stream, lambda r: r["t"] == "hello")  # past the restart
    second += _read_until(stream, lambda r: r["t"] == "gpu")
    header, rest = second[0], second[1:]
    assert header["journal_id"] == journal_id and header["from"] == last
    assert [r["seq"] for r in rest] == list(range(last + 1, last + 1 + len(rest)))
    stream.stdin.close()
    assert stream.wait(10) == 0
    assert daemon.terminate() == 0
