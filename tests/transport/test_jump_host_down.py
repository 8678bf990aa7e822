"""A jump host that is down (real sshd: a bastion and two hosts on loopback) is reported
as the jump host, once, with the hosts behind it named: not as each host being down,
with "check the host is up", while the hosts themselves are up."""

from __future__ import annotations

from pathlib import Path

from cockpit.analysis.alerts import host_alerts
from cockpit.analysis.jump_hosts import jump_host_down
from cockpit.read.health import build_health
from cockpit.transport.ssh_link import HostLink
from cockpit.ui.widgets.gpu_grid import host_line
from tests.transport.support import Collector, options_for, spec_for
from tests.transport.test_preflight import jump_config


def test_a_bastion_outage_is_one_alert_naming_the_hosts_behind_it(
        sshd_hosts, tmp_path: Path, collector: Collector, links: list) -> None:
    bastion, one, two = sshd_hosts(3)
    options = options_for([bastion], tmp_path)
    options.ssh_config = jump_config(tmp_path, bastion, [one, two])
    bastion.stop()  # the hosts behind it are up; only the jump host is not
    for host, alias in ((one, "gpu1"), (two, "gpu2")):
        link = HostLink(spec_for(host, name=alias, address=alias, port=None, user=None,
                                 identity_file=None),
                        lambda: 0, collector.on_chunk, collector.on_state, options)
        links.append(link)
        link.start()

    def newest(name: str) -> tuple[str, str] | None:
        seen = [(s, d) for h, s, d in collector.states if h == name]
        return seen[-1] if seen else None

    assert collector.wait_for(lambda: all(
        (n := newest(name)) is not None and n[0] == "unreachable"
        for name in ("gpu1", "gpu2"))), collector.states
    label = f"{bastion.user}@{bastion.address}:{bastion.port}"
    rows = []
    for name in ("gpu1", "gpu2"):
        state, detail = newest(name) or ("", "")
        assert jump_host_down(detail) == label, detail  # the link names the jump host
        rows.append({"host": name, "state": state, "detail": detail, "last_seen": None})

    alerts = host_alerts(rows, [], now=0.0)
    assert [a.code for a in alerts] == ["jump_host_unreachable"], alerts
    alert = alerts[0]
    assert alert.where == f"jump host {label} / behind it gpu1, gpu2"
    assert alert.what.startswith(f"jump host {label} is unreachable (")
    assert "2 hosts behind it cannot be reached: gpu1, gpu2" in alert.what
    assert f"check the jump host {label}" in alert.hint
    assert "check the host is up" not in alert.hint

    # The screen marks each host as behind the jump host, not as down itself.
    health = build_health(rows, [], [], [], [], None, now=0.0, replaying=False)
    for host in health.hosts:
        assert (host.state, host.behind) == ("unreachable", label)
        assert f"(behind jump host {label}, which is down)" in host_line(host, 6).plain
