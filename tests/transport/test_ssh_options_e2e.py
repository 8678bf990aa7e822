"""OpenSSH options from a config file obeyed at connect time (real sshd on loopback, the
host named only by its alias): GlobalKnownHostsFile decides which host keys are known,
ServerAliveInterval the keepalive of the link, IdentitiesOnly whether ssh-agent's keys
are offered, and HostName, Port and User where and as whom."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.transport.inventory import HostSpec
from cockpit.transport.ssh_config import SshConfig
from cockpit.transport.ssh_link import ConnectFailed, connect
from cockpit.transport.states import AUTH_FAILED, HOSTKEY_UNKNOWN
from tests.harness.sshd import SshdHost
from tests.harness.waiting import wait_for
from tests.transport.support import options_for


def _alias(host: SshdHost, extra: str) -> str:
    return (f"Host gpu1\n  HostName {host.address}\n  Port {host.port}\n  User {host.user}\n"
            f"{extra}")


def _connect(host: SshdHost, tmp_path: Path, config: str):
    path = tmp_path / "ssh_config"
    path.write_text(config)
    options = options_for([], tmp_path)  # no known_hosts but what the config names
    options.ssh_config = SshConfig(path)
    return connect(HostSpec(name="gpu1", address="gpu1"), options)


def test_global_known_hosts_file_and_server_alive_interval(sshd_hosts, tmp_path: Path
                                                           ) -> None:  # fmt: skip
    [host] = sshd_hosts(1)
    global_known = tmp_path / "global_known_hosts"
    global_known.write_text(host.known_hosts_line() + "\n")
    key = f"  IdentityFile {host.key_path}\n"
    # The key is known only through the GlobalKnownHostsFile the config names.
    with pytest.raises(ConnectFailed) as unknown:
        _connect(host, tmp_path, _alias(host, key))
    assert unknown.value.state == HOSTKEY_UNKNOWN
    connection = _connect(host, tmp_path, _alias(
        host, f"{key}  GlobalKnownHostsFile {global_known}\n  ServerAliveInterval 7\n"))
    try:
        transport = connection.client.get_transport()
        assert transport is not None and transport.is_authenticated()
        assert transport.getpeername()[:2] == (host.address, host.port)
        assert transport.get_username() == host.user
        # paramiko keeps the interval private; it is what sends the keepalives.
        assert transport.packetizer._Packetizer__keepalive_interval == 7
    finally:
        connection.close()


@pytest.fixture
def ssh_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ssh-agent (its socket in SSH_AUTH_SOCK), ended after the test."""
    if shutil.which("ssh-agent") is None or shutil.which("ssh-add") is None:
        pytest.skip("needs OpenSSH's ssh-agent and ssh-add")
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: sock.exists() or agent.poll() is not None, what="ssh-agent's socket")
        assert agent.poll() is None, f"ssh-agent exited with {agent.returncode}"
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_identities_only_keeps_ssh_agents_keys_out(sshd_hosts, tmp_path: Path,
                                                   ssh_agent: Path) -> None:
    """The configured IdentityFile is not the host's key; ssh-agent holds the right one.
    Without IdentitiesOnly the agent's key gets in; with it, only the file is offered
    and the login fails as an authentication failure."""
    [host] = sshd_hosts(1)
    subprocess.run(["ssh-add", "-q", str(host.key_path)], check=True,
                   env={"SSH_AUTH_SOCK": str(ssh_agent), "PATH": "/usr/bin:/bin"})
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)],
                   check=True, stdout=subprocess.DEVNULL)
    known = tmp_path / "known"
    known.write_text(host.known_hosts_line() + "\n")
    base = f"  IdentityFile {wrong}\n  UserKnownHostsFile {known}\n"
    _connect(host, tmp_path, _alias(host, base)).close()
    with pytest.raises(ConnectFailed) as refused:
        _connect(host, tmp_path, _alias(host, base + "  IdentitiesOnly yes\n"))
    assert refused.value.state == AUTH_FAILED
