"""A host without the agent gets the zipapp over SFTP, a daemon, and a stream."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agent import __version__
from agent.lockfile import running_daemon
from cockpit.transport.deploy import ZipappBuilder
from cockpit.transport.ssh_link import HostLink
from tests.transport.support import Collector, options_for, spec_for

HOST_PYTHON = "/usr/bin/python3"


def stop_daemon(state_dir: Path) -> None:
    pid = running_daemon(state_dir)
    if pid:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while running_daemon(state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)


def test_missing_agent_is_pushed_started_and_streamed(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    deploy_dir = host.run_dir.parent / "deploy dir"
    spec = spec_for(
        host,
        agent="auto",
        python=HOST_PYTHON if Path(HOST_PYTHON).exists() else "python3",
        deploy_dir=str(deploy_dir),
        run_dirs=(str(host.run_dir),),
    )
    builder = ZipappBuilder(tmp_path / "build")
    link = HostLink(
        spec,
        lambda: collector.high_water(host.name),
        collector.on_chunk,
        collector.on_state,
        options_for(two_hosts, tmp_path),
        builder,
    )
    links.append(link)
    try:
        link.start()
        name = host.name

        def got_hello() -> bool:
            return any(r["t"] == "hello" for r in collector.records.get(name, []))

        assert collector.wait_for(got_hello, timeout=40), collector.states
        states = collector.state_names(name)
        assert states.index("agent-missing") < states.index("deploying") < states.index("streaming")
        pushed = deploy_dir / f"agent-{__version__}.pyz"
        assert pushed.read_bytes() == builder.path().read_bytes()
        assert running_daemon(host.state_dir)
        assert "cockpit-agent" in collector.detail_of(name, "agent-missing")
    finally:
        link.stop()
        stop_daemon(host.state_dir)


def test_explicit_missing_agent_command_is_reported_not_pushed(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[1]
    spec = spec_for(host, agent="/opt/nowhere/cockpit-agent", deploy_dir=str(tmp_path / "d"))
    link = HostLink(
        spec, lambda: 0, collector.on_chunk, collector.on_state, options_for(two_hosts, tmp_path)
    )
    links.append(link)
    link.start()
    assert collector.wait_for(lambda: collector.saw_state(host.name, "agent-missing"))
    detail = collector.detail_of(host.name, "agent-missing")
    assert "/opt/nowhere/cockpit-agent" in detail and 'agent = "auto"' in detail
    assert not collector.saw_state(host.name, "deploying")
    assert not (tmp_path / "d").exists()
