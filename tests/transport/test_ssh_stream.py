"""Streaming the real agent through a real sshd: resume, control, stderr, bad lines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.transport.link import LinkNotStreaming
from cockpit.transport.ssh_link import HostLink
from tests.harness.sshd import REPO_ROOT
from tests.transport.noisy_agent import RECORDS, STDERR_BYTES
from tests.transport.support import Collector, JournalFeeder, options_for, script_command, spec_for


def link_for(host, collector: Collector, tmp_path: Path, hosts, links: list, **spec) -> HostLink:
    link = HostLink(
        spec_for(host, **spec),
        lambda: collector.high_water(host.name),
        collector.on_chunk,
        collector.on_state,
        options_for(hosts, tmp_path),
    )
    links.append(link)
    link.start()
    return link


def test_sshd_killed_mid_stream_resumes_from_high_water_exactly_once(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    feeder = JournalFeeder(host.state_dir, interval=0.004).start()
    try:
        link = link_for(host, collector, tmp_path, two_hosts, links)
        name = host.name
        assert collector.wait_for(lambda: len(collector.seqs.get(name, [])) >= 150)
        host.stop()
        assert collector.wait_for(
            lambda: collector.state_names(name)[-1] in ("unreachable", "stale")
        )
        written_while_down = feeder.journal.head
        time.sleep(0.3)
        assert feeder.journal.head > written_while_down
        host.start()
        assert collector.wait_for(lambda: collector.state_names(name).count("streaming") >= 2)
        head = feeder.stop()
        assert collector.wait_for(lambda: collector.high_water(name) == head)
    finally:
        feeder.close()
    assert collector.seqs[name] == list(range(1, head + 1))
    assert link.connections >= 2
    resumed = collector.headers[name][-1]
    assert resumed["from"] > 0
    assert resumed["from"] == link.last_from_seq
    assert resumed["journal_id"] == collector.headers[name][0]["journal_id"]


@pytest.fixture
def daemon(two_hosts) -> Iterator[subprocess.Popen[bytes]]:
    """The real agent daemon for host 1 (simulated GPUs, fast sampling)."""
    host = two_hosts[0]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "agent", "run", "--state-dir", str(host.state_dir)]
    argv += ["--simulate-gpus", "2", "--interval", "0.25"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_control_op_reaches_the_daemon_and_is_acked(
    two_hosts, daemon, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    link = link_for(host, collector, tmp_path, two_hosts, links)
    name = host.name
    assert collector.wait_for(lambda: collector.saw_state(name, "streaming"))
    link.send_control({"op": "ping", "id": "ping-1"})

    def acked() -> bool:
        return any(
            r.get("t") == "event"
            and r.get("kind") == "control_ack"
            and r.get("data", {}).get("id") == "ping-1"
            for r in collector.records.get(name, [])
        )

    assert collector.wait_for(acked), daemon.stderr
    ack = next(r for r in collector.records[name] if r.get("kind") == "control_ack")
    assert ack["data"]["ok"] is True
    # The samples are periodic, so they may come after the ack; the stream carries them.
    assert collector.wait_for(lambda: {"hello", "gpu", "host"} <= {
        r["t"] for r in collector.records[name]}), collector.records[name]


def test_control_op_refused_when_not_streaming(
    two_hosts, tmp_path: Path, collector: Collector
) -> None:
    host = two_hosts[0]
    link = HostLink(
        spec_for(host),
        lambda: 0,
        collector.on_chunk,
        collector.on_state,
        options_for(two_hosts, tmp_path),
    )
    with pytest.raises(LinkNotStreaming, match=f"host {host.name} is stopped"):
        link.send_control({"op": "ping", "id": "x"})
    with pytest.raises(ValueError, match="'op' key"):
        link.send_control({"id": "x"})


def test_stderr_flood_is_drained_and_malformed_lines_pass_through(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[1]
    link = link_for(
        host, collector, tmp_path, two_hosts, links, agent=script_command("noisy_agent.py")
    )
    name = host.name
    assert collector.wait_for(lambda: len(collector.seqs.get(name, [])) >= RECORDS, timeout=30)
    assert collector.seqs[name] == list(range(1, RECORDS + 1)), collector.states
    assert collector.malformed[name] == 2 * (RECORDS // 10)
    assert collector.wait_for(lambda: "last words on stderr" in link.stderr.lines())
    assert link.stderr.total_bytes >= RECORDS * STDERR_BYTES * 0.9
    assert not collector.saw_state(name, "agent-failed")
