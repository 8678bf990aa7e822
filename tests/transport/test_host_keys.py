"""Host key trust against a real sshd: unknown and changed keys are refused, loudly."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from cockpit.transport.host_keys import KnownHosts, KnownHostsFile, changed_key_message
from cockpit.transport.ssh_link import HostLink
from tests.transport.support import Collector, options_for, spec_for


def fingerprint_of(pub_key: str, tmp_path: Path) -> str:
    """What `ssh-keygen -lf` prints for the host key: the reference fingerprint."""
    path = tmp_path / "hostkey.pub"
    path.write_text(pub_key + "\n")
    out = subprocess.run(
        ["ssh-keygen", "-lf", str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.split()[1]


def start(link: HostLink, links: list) -> HostLink:
    links.append(link)
    link.start()
    return link


def test_unknown_host_key_is_refused_with_fingerprint_and_remedy(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    options = options_for([], tmp_path)  # no known_hosts at all
    link = start(
        HostLink(spec_for(host), lambda: 0, collector.on_chunk, collector.on_state, options), links
    )
    assert collector.wait_for(lambda: collector.saw_state(host.name, "hostkey-unknown"))
    detail = collector.detail_of(host.name, "hostkey-unknown")
    assert fingerprint_of(host.host_key_pub, tmp_path) in detail
    assert "ssh-ed25519" in detail
    assert f"ssh-keyscan -p {host.port} {host.address}" in detail
    assert "--accept-new-host-keys" in detail
    assert not collector.saw_state(host.name, "streaming")
    assert not (tmp_path / "cockpit_known_hosts").exists()
    assert link.connections == 0
    # The remedy, run exactly as printed, makes the next connection trust the host.
    remedy = re.search(r"trust it with `([^`]+)`", detail)
    assert remedy is not None and str(tmp_path / "cockpit_known_hosts") in remedy.group(1)
    assert shutil.which("ssh-keyscan"), "ssh-keyscan comes with the OpenSSH the tests use"
    subprocess.run(remedy.group(1), shell=True, check=True, capture_output=True, timeout=30)
    start(HostLink(spec_for(host), lambda: 0, collector.on_chunk, collector.on_state,
                   options), links)
    assert collector.wait_for(lambda: collector.saw_state(host.name, "streaming"))


def test_changed_host_key_is_refused_as_possible_mitm(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    first, second = two_hosts
    # Record host 2's key under host 1's name: host 1 now presents an unexpected key.
    lying = tmp_path / "known_hosts"
    key_type, key_b64 = second.host_key_pub.split()[:2]
    lying.write_text(f"[{first.address}]:{first.port} {key_type} {key_b64}\n")
    options = options_for([], tmp_path)
    options.known_hosts.extra_files = [lying]
    start(
        HostLink(spec_for(first), lambda: 0, collector.on_chunk, collector.on_state, options), links
    )
    assert collector.wait_for(lambda: collector.saw_state(first.name, "hostkey-changed"))
    detail = collector.detail_of(first.name, "hostkey-changed")
    assert "HOST KEY CHANGED" in detail
    assert "man-in-the-middle" in detail
    assert fingerprint_of(first.host_key_pub, tmp_path) in detail
    assert fingerprint_of(second.host_key_pub, tmp_path) in detail
    assert not collector.saw_state(first.name, "streaming")


def test_new_host_key_accepted_only_with_opt_in_and_recorded(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    options = options_for([], tmp_path, accept_new=True)
    start(
        HostLink(spec_for(host), lambda: 0, collector.on_chunk, collector.on_state, options), links
    )
    assert collector.wait_for(lambda: collector.saw_state(host.name, "streaming"))
    recorded = (tmp_path / "cockpit_known_hosts").read_text()
    assert recorded.strip() == host.known_hosts_line()


def test_wrong_user_key_reports_auth_failed(
    two_hosts, tmp_path: Path, collector: Collector, links: list
) -> None:
    host = two_hosts[0]
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    options = options_for(two_hosts, tmp_path)
    spec = spec_for(host, identity_file=str(stranger))
    start(HostLink(spec, lambda: 0, collector.on_chunk, collector.on_state, options), links)
    assert collector.wait_for(lambda: collector.saw_state(host.name, "auth-failed"))
    detail = collector.detail_of(host.name, "auth-failed")
    assert str(stranger) in detail and "authentication failed" in detail


@pytest.mark.parametrize("key, said", [
    ("missing", "cannot read the private key {key} (No such file or directory)"),
    ("garbage", "authentication failed (not a valid OPENSSH private key file); tried "
                "ssh-agent and {key}"),
])
def test_an_identity_file_that_is_no_key_reports_auth_failed_not_unreachable(
    two_hosts, tmp_path: Path, collector: Collector, links: list, key: str, said: str
) -> None:
    """The server answered: the key file on this side is what to fix, and the host is
    not down (which would be retried at the fast pace, forever)."""
    host = two_hosts[0]
    path = tmp_path / key
    if key == "garbage":
        path.write_text("not a key\n")
    options = options_for(two_hosts, tmp_path)
    spec = spec_for(host, identity_file=str(path))
    start(HostLink(spec, lambda: 0, collector.on_chunk, collector.on_state, options), links)
    assert collector.wait_for(lambda: collector.saw_state(host.name, "auth-failed"))
    assert said.format(key=path) in collector.detail_of(host.name, "auth-failed")
    assert "unreachable" not in collector.state_names(host.name)


def test_closed_port_reports_unreachable(
    tmp_path: Path, collector: Collector, links: list, two_hosts
) -> None:
    host = two_hosts[1]
    host.stop()
    options = options_for(two_hosts, tmp_path)
    start(
        HostLink(spec_for(host), lambda: 0, collector.on_chunk, collector.on_state, options), links
    )
    assert collector.wait_for(lambda: collector.state_names(host.name).count("unreachable") >= 2)
    detail = collector.detail_of(host.name, "unreachable")
    assert "refused" in detail.lower()


def test_the_changed_key_message_quotes_the_host_name_for_the_shell() -> None:
    """The removal command is meant to be pasted into a shell: the name in it is one
    word whatever it holds (`[host]:port` has shell globbing brackets)."""
    key = paramiko.RSAKey.generate(1024)
    message = changed_key_message("gpu-1", "[gpu-1]:2222", key, key, [])
    assert "`ssh-keygen -R '[gpu-1]:2222'`" in message
    odd = changed_key_message("gpu-1", "it's", key, key, [])
    assert "`ssh-keygen -R 'it'\"'\"'s'`" in odd


def test_known_hosts_files_are_parsed_once_and_give_each_client_only_its_hosts_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ecdsa, other_ecdsa, later_ecdsa = (paramiko.ECDSAKey.generate() for _ in range(3))
    rsa = paramiko.RSAKey.generate(1024)
    hashed = paramiko.HostKeys.hash_host("[h3]:2222")
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text(f"[h1]:2222 {ecdsa.get_name()} {ecdsa.get_base64()}\n"
                     f"[h2]:2222 {other_ecdsa.get_name()} {other_ecdsa.get_base64()}\n"
                     f"{hashed} {other_ecdsa.get_name()} {other_ecdsa.get_base64()}\n")
    # The second file's key of a type the first has for h1 is not used (ssh takes the
    # first); its key of another type is, after the first's.
    second.write_text(f"[h1]:2222 {later_ecdsa.get_name()} {later_ecdsa.get_base64()}\n"
                      f"[h1]:2222 {rsa.get_name()} {rsa.get_base64()}\n")
    known = KnownHosts(extra_files=[first, second], use_system=False, use_user=False,
                       record_file=tmp_path / "record")
    parses: list[str] = []
    load = paramiko.HostKeys.load
    monkeypatch.setattr(paramiko.HostKeys, "load",
                        lambda self, filename: (parses.append(filename), load(self, filename)))

    def keys_for(name: str) -> paramiko.HostKeys:
        client = paramiko.SSHClient()
        known.load_into(client, name)
        return client.get_host_keys()

    h1 = keys_for("[h1]:2222")
    assert h1.keys() == ["[h1]:2222"]  # no other host's keys
    assert h1.lookup("[h1]:2222").keys() == [ecdsa.get_name(), rsa.get_name()]
    assert h1.lookup("[h1]:2222")[ecdsa.get_name()] == ecdsa
    assert keys_for("[h3]:2222").lookup("[h3]:2222")[other_ecdsa.get_name()] == other_ecdsa
    assert keys_for("[h9]:2222").keys() == []
    assert parses == [str(first), str(second)]
    # A key recorded meanwhile (--accept-new-host-keys) is read: the file changed.
    known.record("[h9]:2222", later_ecdsa)
    assert keys_for("[h9]:2222").lookup("[h9]:2222")[later_ecdsa.get_name()] == later_ecdsa
    assert parses == [str(first), str(second), str(tmp_path / "record")]
    with first.open("a") as handle:
        handle.write(f"[h4]:2222 {rsa.get_name()} {rsa.get_base64()}\n")
    assert keys_for("[h4]:2222").lookup("[h4]:2222")[rsa.get_name()] == rsa
    assert parses[3:] == [str(first)]


def test_a_hashed_known_hosts_file_gives_the_keys_paramiko_finds_without_hashing_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain, hashed (HashKnownHosts) and mixed lines give each host the keys paramiko's
    own lookup gives, first line first per key type; a hashed name that does not decode
    matches nothing instead of failing every lookup."""
    keys = [paramiko.ECDSAKey.generate() for _ in range(3)]
    rsa = paramiko.RSAKey.generate(1024)
    hashed = paramiko.HostKeys.hash_host

    def line(names: str, key: paramiko.PKey) -> str:
        return f"{names} {key.get_name()} {key.get_base64()}\n"

    lines = [line(hashed(f"[h{i}]:2222"), keys[i % 3]) for i in range(40)]
    lines += [line(f"[h1]:2222,{hashed('[h50]:2222')}", keys[2]),  # a type h1 has: unused
              line(hashed("[h1]:2222"), rsa),  # a type h1 lacks, on a later line
              line("[h60]:2222", keys[0]), line("[h60]:2222", keys[1])]
    path = tmp_path / "known_hosts"
    path.write_text("".join(lines))
    reference = paramiko.HostKeys(str(path))
    path.write_text("".join(lines) + line("|1|@@@|###", keys[0]))
    indexed = KnownHostsFile(str(path))
    hashes: list[str] = []

    def counted(hostname: str, salt: str | None = None) -> str:
        hashes.append(hostname)
        return hashed(hostname, salt)

    monkeypatch.setattr(paramiko.HostKeys, "hash_host", staticmethod(counted))
    names = ["[h0]:2222", "[h1]:2222", "[h39]:2222", "[h50]:2222", "[h60]:2222",
             "[h99]:2222", "h1", "|1|@@@|###"]
    found = {name: indexed.keys_for(name) for name in names}
    assert hashes == []  # no line's hash was formatted: one HMAC each, on bytes
    for name in names:
        expected = reference.lookup(name)
        if expected is None:
            assert found[name] is None, name
            continue
        got = found[name]
        assert got is not None, name
        assert list(got) == list(dict.fromkeys(expected.keys())), name
        assert all(got[kind] == expected[kind] for kind in got), name
    assert found["[h1]:2222"] == {keys[1].get_name(): keys[1], rsa.get_name(): rsa}
    assert found["[h60]:2222"] == {keys[0].get_name(): keys[0]}
