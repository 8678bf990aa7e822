"""OpenSSH parity without a server: home from the password database, the config options
that decide trust and keys, and how StrictHostKeyChecking changes what is accepted."""

from __future__ import annotations

import pwd
from pathlib import Path

import paramiko
import pytest

from cockpit.transport.host_keys import HostKeyUnknown, KnownHosts, expand_home
from cockpit.transport.inventory import HostSpec
from cockpit.transport.ssh_config import SshConfig, SshConfigError


def resolve(tmp_path: Path, text: str, alias: str = "gpu1"):
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return SshConfig(path).resolve(HostSpec(name=alias, address=alias))


def test_home_is_the_password_databases_not_home(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    home = Path(pwd.getpwuid(__import__("os").getuid()).pw_dir)
    assert expand_home("~/.ssh/known_hosts") == home / ".ssh/known_hosts"
    assert KnownHosts().files()[1] == home / ".ssh/known_hosts"
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("LOGNAME", "someone-else")
    user = pwd.getpwuid(__import__("os").getuid()).pw_name
    assert SshConfig(None).resolve(HostSpec(name="h", address="h")).user == user


def test_trust_and_key_options_are_read(tmp_path: Path) -> None:
    endpoint = resolve(tmp_path, "Host gpu*\n  UserKnownHostsFile ~/k1 /etc/k2\n"
                       "  GlobalKnownHostsFile /etc/g\n  StrictHostKeyChecking accept-new\n"
                       "  IdentitiesOnly yes\n  ServerAliveInterval 7\n  ConnectTimeout 3\n")
    assert endpoint.user_known_hosts == (str(expand_home("~/k1")), "/etc/k2")
    assert endpoint.global_known_hosts == ("/etc/g",)
    assert endpoint.strict_host_key_checking == "accept-new"
    assert endpoint.identities_only and endpoint.server_alive_interval == 7.0
    assert endpoint.connect_timeout == 3.0
    with pytest.raises(SshConfigError, match="StrictHostKeyChecking 'maybe'"):
        resolve(tmp_path, "Host gpu1\n  StrictHostKeyChecking maybe\n")


def test_strict_host_key_checking_decides_what_an_unknown_key_gets(tmp_path: Path) -> None:
    key = paramiko.RSAKey.generate(1024)
    base = KnownHosts(use_system=False, use_user=False, record_file=tmp_path / "cockpit")
    client = paramiko.SSHClient()
    # accept-new records into the config's first UserKnownHostsFile.
    mine = tmp_path / "mine"
    base.for_config([str(mine)], (), "accept-new").policy("gpu1").missing_host_key(
        client, "[10.0.0.1]:22", key)
    assert key.get_base64() in mine.read_text() and not (tmp_path / "cockpit").exists()
    # yes (and the default) refuses; so does `no` unless it was allowed by flag.
    with pytest.raises(HostKeyUnknown, match="cockpit hosts trust gpu1"):
        base.for_config((), (), "yes").policy("gpu1").missing_host_key(client, "h", key)
    with pytest.raises(HostKeyUnknown, match="StrictHostKeyChecking no"):
        base.for_config((), (), "no").policy("gpu1").missing_host_key(client, "h", key)
    allowed = KnownHosts(use_system=False, use_user=False, allow_unchecked=True,
                         record_file=tmp_path / "cockpit")
    allowed.for_config((), (), "no").policy("gpu1").missing_host_key(client, "h", key)
    assert not (tmp_path / "cockpit").exists()  # used, never recorded


def test_a_host_behind_a_jump_is_not_told_to_keyscan(tmp_path: Path) -> None:
    key = paramiko.RSAKey.generate(1024)
    known = KnownHosts(use_system=False, use_user=False, record_file=tmp_path / "c")
    with pytest.raises(HostKeyUnknown) as caught:
        known.policy("gpu1", behind_jump=True).missing_host_key(
            paramiko.SSHClient(), "[10.0.0.1]:22", key)
    assert "ssh-keyscan" not in str(caught.value)
    assert "cockpit hosts trust gpu1" in str(caught.value)


def test_an_unknown_jump_host_key_points_at_the_jump_host(tmp_path: Path) -> None:
    key = paramiko.RSAKey.generate(1024)
    known = KnownHosts(use_system=False, use_user=False, record_file=tmp_path / "c")
    with pytest.raises(HostKeyUnknown) as caught:
        known.policy("gpu1 via jump host 10.0.0.9").missing_host_key(
            paramiko.SSHClient(), "[10.0.0.9]:2200", key)
    assert "cockpit hosts trust 10.0.0.9:2200" in str(caught.value)


def test_a_bastion_outage_is_hinted_as_the_bastion() -> None:
    from cockpit.analysis import alerts

    hosts = [{"host": "gpu1", "state": "unreachable", "last_seen": 1.0,
              "detail": "jump host ops@10.0.0.9:22: cannot connect: refused"},
             {"host": "gpu2", "state": "unreachable", "last_seen": 1.0, "detail": "timed out"},
             {"host": "gpu3", "state": "unreachable", "last_seen": 1.0,
              "detail": "jump host ops@10.0.0.9:22 cannot reach 10.0.0.3:22: refused"}]
    hints = {a.where: a.hint for a in alerts.host_alerts(hosts, [], now=2.0)}
    # gpu1 is behind the jump host that is down: the jump host's alert names it.
    assert "check the jump host ops@10.0.0.9:22" in hints[
        "jump host ops@10.0.0.9:22 / behind it gpu1"]
    assert "host gpu1" not in hints and "jump host" not in hints["host gpu2"]
    # The jump host answered but cannot reach gpu3: gpu3's own fault.
    assert "cannot reach this host" in hints["host gpu3"]
