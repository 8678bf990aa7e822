"""`cockpit hosts trust HOST`: fetch a host's key the way the links reach it, then record it.

`ssh-keyscan` from the operator's machine cannot reach a GPU host that only a bastion can
see. Here the key is fetched over the same path a link takes (the ProxyJump chain, each
jump host's own key checked as usual), shown with its fingerprint, and recorded only on
the operator's word, exactly as `--accept-new-host-keys` would record it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from cockpit.transport.host_keys import HostKeyUnknown, KnownHosts, expand_home, fingerprint
from cockpit.transport.inventory import HostSpec
from cockpit.transport.link import LinkOptions
from cockpit.transport.ssh_link import ConnectFailed, connect
from cockpit.transport.states import UNREACHABLE


@dataclass(frozen=True)
class FetchedKey:
    name: str  # as known_hosts names it: `host` or `[host]:port`
    key: paramiko.PKey
    known: bool  # already trusted: nothing to record
    record_in: Path

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    def record(self) -> Path:
        path = self.record_in
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="ascii") as handle:
            handle.write(f"{self.name} {self.key.get_name()} {self.key.get_base64()}\n")
        path.chmod(0o600)
        return path


class _Caught(HostKeyUnknown):
    """The target's unknown key, caught before authentication."""


class _CatchPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, caught: list[tuple[str, paramiko.PKey]]) -> None:
        self.caught = caught

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        self.caught.append((hostname, key))
        raise _Caught(f"{hostname}: key caught")


@dataclass
class _Catching(KnownHosts):
    """Known hosts as given, except that the target's unknown key is caught."""

    target_label: str = ""
    caught: list[tuple[str, paramiko.PKey]] = field(default_factory=list)

    def policy(self, host_label: str, behind_jump: bool = False
               ) -> paramiko.MissingHostKeyPolicy:  # fmt: skip
        if host_label == self.target_label:
            return _CatchPolicy(self.caught)
        return super().policy(host_label, behind_jump)


def fetch_host_key(spec: HostSpec, options: LinkOptions) -> FetchedKey:
    """The key `spec` presents, reached through its jump hosts. Raises `ConnectFailed`
    when it cannot be reached, a jump host is not trusted, or the key has changed."""
    base = options.known_hosts
    catching = _Catching(extra_files=base.extra_files, use_system=base.use_system,
                         use_user=base.use_user, accept_new=False,
                         record_file=base.record_file, user_files=base.user_files,
                         system_files=base.system_files, target_label=spec.name)
    endpoint = options.config().resolve(spec)
    record_in = expand_home(endpoint.user_known_hosts[0] if endpoint.user_known_hosts
                            else base.record_file)
    probe = LinkOptions(known_hosts=catching, ssh_config=options.config(),
                        connect_timeout=options.connect_timeout)
    try:
        connection = connect(spec, probe)
    except ConnectFailed:
        if catching.caught:
            name, key = catching.caught[0]
            return FetchedKey(name, key, known=False, record_in=record_in)
        raise
    try:
        transport = connection.client.get_transport()
        key = transport.get_remote_server_key() if transport is not None else None
        if key is None:
            raise ConnectFailed(UNREACHABLE, f"{spec.name}: no host key received", False)
        from cockpit.transport.host_keys import known_hosts_name

        name = known_hosts_name(endpoint.key_name_host, endpoint.port)
        return FetchedKey(name, key, known=True, record_in=record_in)
    finally:
        connection.close()
