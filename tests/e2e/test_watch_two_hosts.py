"""End to end: two pretend hosts (real sshd on 127.0.0.2 and .3), each with the real agent
daemon supervising a real run of the example trainer, streamed by the cockpit's live
session into one DuckDB file — with one host's sshd killed and restarted mid-run.

The proof is against the hosts' own journals: every journaled record of both hosts is
in the store exactly once (count and seq range), nothing more.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from cockpit.sessions.live import LiveSession
from tests.harness.sshd import REPO_ROOT
from tests.harness.torchrun import FAST_SETTINGS, TRAIN_SCRIPT
from tests.transport.support import options_for, spec_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

STEPS = 120


def _start_daemon(state_dir: Path, run_dir: Path, data_dir: Path, job: str) -> subprocess.Popen:
    trainer = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
        str(TRAIN_SCRIPT), "--max-steps", str(STEPS), "--resume", "auto",
        "--set", f"data.dir={data_dir}", *(x for s in FAST_SETTINGS for x in ("--set", s)),
    ]
    argv = [
        sys.executable, "-m", "agent", "run", "--state-dir", str(state_dir),
        "--run-dir", str(run_dir), "--simulate-gpus", "1", "--interval", "0.5",
        "--job", job, "--", *trainer,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _journal(state_dir: Path) -> list[dict]:
    """The records written so far: the agent may be halfway through its newest line."""
    records = []
    for seg in sorted((state_dir / "journal").glob("*.ndjson")):
        whole, _, _partial = seg.read_text().rpartition("\n")
        records += [json.loads(line) for line in whole.splitlines() if line.strip()]
    return records


def _exited(state_dir: Path) -> bool:
    return any(r.get("kind") == "job_exited" for r in _journal(state_dir) if r["t"] == "event")


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_two_hosts_stream_a_real_run_exactly_once_across_an_sshd_outage(
    sshd_hosts, tmp_path: Path
) -> None:
    hosts = sshd_hosts(2)
    data_dir = tmp_path / "data"
    daemons = [
        _start_daemon(h.state_dir, h.run_dir, data_dir, f"job-{i}") for i, h in enumerate(hosts)
    ]
    store_path = tmp_path / "recording.duckdb"
    options = options_for(hosts, tmp_path, stale_after=5.0)
    session = LiveSession([spec_for(h) for h in hosts], store_path, options)
    try:
        with session:
            victim = hosts[0]

            def trained(host) -> int:
                return sum(1 for r in _journal(host.state_dir) if r["t"] == "train")

            _wait(lambda: trained(victim) >= 20, 120, "the first host's trainer to start")
            _wait(lambda: session.writer.high_water(victim.name) > 0, 30, "first records stored")
            victim.stop()
            _wait(lambda: session.fleet.status()[victim.name].state != "streaming", 30,
                  "the link to notice the outage")
            time.sleep(2.0)  # the trainer keeps training; the agent keeps journaling
            victim.start()
            for h in hosts:
                _wait(lambda h=h: _exited(h.state_dir), 180, f"{h.name}'s job to finish")
            heads = {h.name: _journal(h.state_dir)[-1]["seq"] for h in hosts}
            for name, head in heads.items():
                _wait(lambda n=name, hd=head: session.writer.high_water(n) >= hd, 60,
                      f"{name} to be stored up to seq {head}")
            # The outage really cut the stream: the victim's link had to reconnect.
            assert session.fleet.links[victim.name].connections >= 2
    finally:
        for d in daemons:
            _stop(d)

    # Compare up to the heads the session was seen to store: the daemons journal a few
    # more samples while shutting down, after the session has ended.
    journals = {
        h.name: [r for r in _journal(h.state_dir) if r["seq"] <= heads[h.name]] for h in hosts
    }
    con = duckdb.connect(str(store_path), read_only=True)
    tables = ["hello", "gpu", "host_sample", "run", "train", "eval", "event", "log", "alert",
              "other"]
    union = " UNION ALL ".join(f"SELECT host, seq FROM {t}" for t in tables)
    for name, records in journals.items():
        stored = [r[0] for r in con.execute(
            f"SELECT seq FROM ({union}) WHERE host = ? ORDER BY seq", [name]).fetchall()]
        seqs = [r["seq"] for r in records]
        assert seqs == list(range(1, len(seqs) + 1)), f"{name}: the journal itself has gaps"
        stored_upto = [s for s in stored if s <= seqs[-1]]
        assert stored_upto == seqs, (
            f"{name}: stored {len(stored_upto)} records, journal has {len(seqs)}; "
            f"missing {sorted(set(seqs) - set(stored_upto))[:10]}, "
            f"repeated {len(stored_upto) - len(set(stored_upto))}"
        )
        typed = con.execute("SELECT count(*) FROM train WHERE host = ? AND seq <= ?",
                            [name, seqs[-1]]).fetchone()[0]
        assert typed == sum(1 for r in records if r["t"] == "train")
        assert con.execute("SELECT count(*) FROM other WHERE host = ?", [name]).fetchone()[0] == 0
    malformed = con.execute("SELECT coalesce(sum(malformed), 0) FROM hosts").fetchone()[0]
    assert malformed == 0
    states = dict(con.execute("SELECT host, state FROM hosts").fetchall())
    assert set(states) == {h.name for h in hosts}
    con.close()
