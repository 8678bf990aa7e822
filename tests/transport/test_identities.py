"""Identity files and known_hosts files read once for a whole fleet, not once per link."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from cockpit.transport.host_keys import KnownHosts
from cockpit.transport.identities import CachingClient, IdentityCache
from cockpit.transport.ssh_link import connect
from tests.transport.support import options_for, spec_for


def _keygen(path: Path, kind: str = "ed25519") -> None:
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)


def _load(cache: IdentityCache, path: Path, klass: type[paramiko.PKey]) -> paramiko.PKey:
    """What `CachingClient._key_from_filepath` asks of the cache (paramiko's own loader
    logs through the client's transport, which only a connecting client has)."""
    return cache.load(str(path), klass, None,
                      lambda: klass.from_private_key_file(str(path), None))


def test_a_key_is_loaded_once_until_its_file_changes(tmp_path: Path) -> None:
    key_file = tmp_path / "id"
    _keygen(key_file)
    cache = IdentityCache()
    first = _load(cache, key_file, paramiko.Ed25519Key)
    again = _load(cache, key_file, paramiko.Ed25519Key)
    assert again is first and cache.loads == 1
    _keygen(key_file)  # a new key in the same place
    changed = _load(cache, key_file, paramiko.Ed25519Key)
    assert cache.loads == 2
    assert changed.get_fingerprint() != first.get_fingerprint()


def test_a_key_that_does_not_load_fails_the_same_way_every_time(tmp_path: Path) -> None:
    key_file = tmp_path / "id"
    _keygen(key_file)
    cache = IdentityCache()
    for _ in range(2):  # paramiko tries the key classes in turn: the wrong one fails
        with pytest.raises(paramiko.SSHException):
            _load(cache, key_file, paramiko.RSAKey)
        with pytest.raises(FileNotFoundError):
            _load(cache, tmp_path / "missing", paramiko.Ed25519Key)
    encrypted = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(encrypted)],
                   check=True)
    for _ in range(2):
        with pytest.raises(paramiko.PasswordRequiredException):
            _load(cache, encrypted, paramiko.Ed25519Key)
    assert cache.loads == 0


@pytest.mark.slow
def test_a_key_file_that_is_not_the_class_tried_is_read_once_until_it_changes(
    tmp_path: Path,
) -> None:
    """paramiko tries RSA, ECDSA, then Ed25519 on every identity file, every connect:
    the failed tries are kept like the key, so an ed25519 file is parsed once per class."""
    key_file = tmp_path / "id"
    _keygen(key_file)
    cache = IdentityCache()
    reads: list[type[paramiko.PKey]] = []

    def load(klass: type[paramiko.PKey]) -> paramiko.PKey:
        def loader() -> paramiko.PKey:
            reads.append(klass)
            return klass.from_private_key_file(str(key_file), None)
        return cache.load(str(key_file), klass, None, loader)

    messages = []
    for _ in range(3):
        for klass in (paramiko.RSAKey, paramiko.ECDSAKey):
            with pytest.raises(paramiko.SSHException) as failed:
                load(klass)
            messages.append(str(failed.value))
        assert isinstance(load(paramiko.Ed25519Key), paramiko.Ed25519Key)
    assert reads == [paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key]
    assert messages[:2] == messages[2:4] == messages[4:]  # the same error every time
    assert cache.failures == 2 and cache.loads == 1
    _keygen(key_file, "rsa")  # now an RSA key in the same place: read again, and it loads
    assert isinstance(load(paramiko.RSAKey), paramiko.RSAKey)
    assert reads[3:] == [paramiko.RSAKey]


def test_links_share_one_load_of_their_identity(two_hosts, tmp_path: Path) -> None:
    options = options_for(two_hosts, tmp_path)
    for host in two_hosts:
        connection = connect(spec_for(host), options)
        assert isinstance(connection.client, CachingClient)
        assert connection.client.get_transport().is_authenticated()
        connection.close()
    assert options.identities.loads == 1


def test_known_hosts_parsed_once_by_links_connecting_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first wave of a fleet's connects all find the parse cache empty: one of them
    parses the file and the others take its result."""
    known_file = tmp_path / "known_hosts"
    key = tmp_path / "host_key"
    _keygen(key)
    known_file.write_text("".join(
        f"[127.0.{i // 250}.{i % 250 + 1}]:2222 {key.with_suffix('.pub').read_text()}"
        for i in range(300)))  # fmt: skip
    known = KnownHosts(extra_files=[known_file], use_system=False, use_user=False,
                       record_file=tmp_path / "record")
    parses = []
    original = paramiko.HostKeys.load

    def load(self: paramiko.HostKeys, filename: str) -> None:
        parses.append(filename)
        original(self, filename)

    monkeypatch.setattr(paramiko.HostKeys, "load", load)
    start = threading.Barrier(8)
    found: list[int] = []

    def link(i: int) -> None:
        client = paramiko.SSHClient()
        start.wait()
        known.load_into(client, f"[127.0.0.{i + 1}]:2222")
        found.append(len(client.get_host_keys().keys()))

    threads = [threading.Thread(target=link, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert parses == [str(known_file)]
    assert found == [1] * 8


def test_links_connecting_at_once_load_a_key_once(tmp_path: Path) -> None:
    key_file = tmp_path / "id"
    _keygen(key_file)
    cache = IdentityCache()
    start = threading.Barrier(8)
    calls: list[int] = []

    def slow_loader() -> paramiko.PKey:
        calls.append(1)
        time.sleep(0.05)  # as an RSA key's checks take: long enough for all to arrive
        return paramiko.Ed25519Key.from_private_key_file(str(key_file))

    keys: list[paramiko.PKey] = []

    def link() -> None:
        start.wait()
        keys.append(cache.load(str(key_file), paramiko.Ed25519Key, None, slow_loader))

    threads = [threading.Thread(target=link) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and cache.loads == 1
    assert len(keys) == 8 and all(k is keys[0] for k in keys)
