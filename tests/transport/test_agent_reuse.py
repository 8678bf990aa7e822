"""A pushed agent on a bare host Python keeps speaking, and the next cockpit reuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import __version__
from agent.lockfile import running_daemon
from cockpit.transport.deploy import ZipappBuilder, agent_content_hash
from cockpit.transport.ssh_link import HostLink
from tests.transport.support import Collector, options_for, spec_for
from tests.transport.test_deploy import stop_daemon

BARE_PYTHON = "/usr/bin/python3"  # the system Python: no psutil


def host_records(collector: Collector, name: str) -> int:
    return sum(1 for r in collector.records.get(name, []) if r["t"] == "host")


@pytest.mark.skipif(not Path(BARE_PYTHON).exists(), reason="needs the system python3")
def test_bare_python_agent_streams_and_is_reused(two_hosts, tmp_path: Path, links: list
                                                 ) -> None:  # fmt: skip
    host = two_hosts[0]
    deploy_dir = host.run_dir.parent / "deploy"
    spec = spec_for(host, agent="auto", python=BARE_PYTHON, deploy_dir=str(deploy_dir),
                    run_dirs=(str(host.run_dir),))
    options = options_for(two_hosts, tmp_path)  # stale after 5 s without a record
    pushed = deploy_dir / f"agent-{__version__}.pyz"
    log = deploy_dir / "agent.log"
    try:
        first = Collector()
        link = HostLink(spec, lambda: first.high_water(host.name), first.on_chunk,
                        first.on_state, options, ZipappBuilder(tmp_path / "b1"))
        links.append(link)
        link.start()
        # Eight host records at 1 Hz outlast the 5 s stale limit: no psutil, no GPU,
        # and still the link streams without a reconnect.
        assert first.wait_for(lambda: host_records(first, host.name) >= 8, timeout=60), \
            first.states
        assert "stale" not in first.state_names(host.name)
        assert link.connections == 1
        hello = next(r for r in first.records[host.name] if r["t"] == "hello")
        assert hello["psutil"] is False
        link.stop()
        assert (deploy_dir / f"agent-{__version__}.pyz.sha256").read_text().strip() \
            == agent_content_hash()
        before = (pushed.stat().st_ino, pushed.stat().st_mtime_ns, log.stat().st_size)
        daemon = running_daemon(host.state_dir)

        # A second cockpit (its own zipapp build, not byte-identical) reuses both.
        second = Collector()
        again = HostLink(spec, lambda: second.high_water(host.name), second.on_chunk,
                         second.on_state, options, ZipappBuilder(tmp_path / "b2"))
        links.append(again)
        again.start()
        assert second.wait_for(lambda: host_records(second, host.name) >= 2, timeout=60)
        again.stop()
        assert (pushed.stat().st_ino, pushed.stat().st_mtime_ns, log.stat().st_size) == before
        assert running_daemon(host.state_dir) == daemon
        assert not (tmp_path / "b2").exists()  # nothing was even built to push

        # Another build's copy (its hash differs) is replaced.
        (deploy_dir / f"agent-{__version__}.pyz.sha256").write_text("another build\n")
        third = Collector()
        replace = HostLink(spec, lambda: third.high_water(host.name), third.on_chunk,
                           third.on_state, options, ZipappBuilder(tmp_path / "b3"))
        links.append(replace)
        replace.start()
        assert third.wait_for(lambda: host_records(third, host.name) >= 1, timeout=60)
        replace.stop()
        assert pushed.stat().st_ino != before[0]
        assert pushed.read_bytes() == (tmp_path / "b3" / pushed.name).read_bytes()
    finally:
        stop_daemon(host.state_dir)
