"""~/.ssh/config is honoured: aliases, users, ports, keys, and ProxyJump through sshd."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cockpit.transport.inventory import HostSpec
from cockpit.transport.ssh_config import SshConfig, SshConfigError
from cockpit.transport.ssh_link import PREFERRED_CIPHERS, HostLink, connect, ssh_transport
from tests.transport.support import Collector, JournalFeeder, options_for, spec_for

CONFIG = """\
Host bastion
    HostName 10.1.0.1
    User jump
    Port 2200

Host gpu*
    HostName %h.cluster.internal
    User train
    IdentityFile ~/.ssh/cluster_key
    ProxyJump bastion,ops@10.1.0.2:2201
    ConnectTimeout 7
"""


def config(tmp_path: Path, text: str = CONFIG) -> SshConfig:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return SshConfig(path)


def test_alias_resolves_like_ssh_does(tmp_path: Path) -> None:
    endpoint = config(tmp_path).resolve(HostSpec(name="g", address="gpu07"))
    assert endpoint.hostname == "gpu07.cluster.internal"
    assert (endpoint.user, endpoint.port, endpoint.connect_timeout) == ("train", 22, 7.0)
    assert endpoint.identity_files == (str(Path("~/.ssh/cluster_key").expanduser()),)
    hops = [(j.user, j.hostname, j.port) for j in endpoint.proxy_jump]
    assert hops == [("jump", "10.1.0.1", 2200), ("ops", "10.1.0.2", 2201)]


def test_inventory_values_override_the_config(tmp_path: Path) -> None:
    spec = HostSpec(name="g", address="gpu07", user="root", port=2022, identity_file="/k")
    endpoint = config(tmp_path).resolve(spec)
    assert (endpoint.user, endpoint.port) == ("root", 2022)
    assert endpoint.identity_files[0] == "/k"


def test_bad_config_values_are_reported(tmp_path: Path) -> None:
    with pytest.raises(SshConfigError, match="Port 'abc'"):
        config(tmp_path, "Host x\n  Port abc\n").resolve(HostSpec(name="x", address="x"))


def test_proxy_jump_reaches_a_host_through_another(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    jump, target = two_hosts
    ssh_config = config(
        tmp_path,
        f"Host jumpbox\n  HostName {jump.address}\n  Port {jump.port}\n  User {jump.user}\n"
        f"  IdentityFile {jump.key_path}\n\n"
        f"Host trainer\n  HostName {target.address}\n  Port {target.port}\n"
        f"  ProxyJump jumpbox\n",
    )
    options = options_for(two_hosts, tmp_path)
    options.ssh_config = ssh_config
    spec = spec_for(target, address="trainer", port=None)
    feeder = JournalFeeder(target.state_dir, interval=0.01).start()
    try:
        link = HostLink(spec, lambda: 0, collector.on_chunk, collector.on_state, options)
        links.append(link)
        link.start()
        assert collector.wait_for(lambda: len(collector.seqs.get(target.name, [])) >= 5)
    finally:
        feeder.close()
    # The jump host's sshd carried the tunnel: stopping it drops the stream.
    jump.stop()
    assert collector.wait_for(lambda: collector.state_names(target.name)[-1] != "streaming")


def test_links_use_aes_gcm_and_every_hop_too(two_hosts, tmp_path: Path) -> None:
    """One AEAD pass per packet on both ends (what the stream costs the GPU host's sshd);
    a jump host's hop as well. A server without it gets paramiko's usual list after it."""
    jump, target = two_hosts
    options = options_for(two_hosts, tmp_path)
    options.ssh_config = config(
        tmp_path,
        f"Host jumpbox\n  HostName {jump.address}\n  Port {jump.port}\n  User {jump.user}\n"
        f"  IdentityFile {jump.key_path}\n\n"
        f"Host trainer\n  HostName {target.address}\n  Port {target.port}\n"
        f"  ProxyJump jumpbox\n",
    )
    connection = connect(spec_for(target, address="trainer", port=None), options)
    try:
        for client in (connection.client, *connection.jumps):
            transport = client.get_transport()
            assert transport is not None
            assert transport.remote_cipher == transport.local_cipher == "aes128-gcm@openssh.com"
    finally:
        connection.close()
    with socket.socket() as sock:
        offered = ssh_transport(sock).get_security_options().ciphers
    assert offered[:2] == PREFERRED_CIPHERS and "aes128-ctr" in offered[2:]
