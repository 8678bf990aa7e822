"""Resolve a host the way `ssh HOST` would: ~/.ssh/config, then the inventory's overrides.

Operators already describe their clusters in ~/.ssh/config (aliases, users, keys, bastion
hosts); the cockpit reads the same file so that `cockpit gpu01` reaches what `ssh gpu01`
reaches. Values set explicitly in the inventory win, as command-line options do for ssh.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from cockpit.transport.host_keys import expand_home
from cockpit.transport.inventory import HostSpec

# `~` is the password database's home (`host_keys.home_dir`), as for ssh.
DEFAULT_SSH_CONFIG = Path("~/.ssh/config")


class SshConfigError(ValueError):
    """The SSH config could not be read or names something unusable."""


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect, fully resolved."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    host_key_alias: str | None = None
    connect_timeout: float | None = None
    proxy_jump: tuple[Endpoint, ...] = ()
    # UserKnownHostsFile / GlobalKnownHostsFile / StrictHostKeyChecking / IdentitiesOnly /
    # ServerAliveInterval of this host's entry (None / () when the entry sets none).
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    strict_host_key_checking: str | None = None
    identities_only: bool = False
    server_alive_interval: float | None = None

    @property
    def key_name_host(self) -> str:
        """The name its host key is recorded under in known_hosts."""
        return self.host_key_alias or self.hostname

    def label(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


class SshConfig:
    """A parsed ssh config file (absent file = no config, as for ssh)."""

    def __init__(self, path: str | Path | None = DEFAULT_SSH_CONFIG) -> None:
        self.path = None if path is None else expand_home(path)
        self._config = paramiko.SSHConfig()
        if self.path is not None and self.path.is_file():
            try:
                self._config = paramiko.SSHConfig.from_path(str(self.path))
            except (OSError, ValueError, paramiko.ConfigParseError) as exc:
                raise SshConfigError(f"{self.path}: cannot parse SSH config: {exc}") from exc

    def lookup(self, alias: str) -> dict[str, Any]:  # str values; identityfile a list
        try:
            return dict(self._config.lookup(alias))
        except (ValueError, paramiko.ConfigParseError, socket.gaierror) as exc:
            where = self.path or "ssh config"
            raise SshConfigError(f"{where}: cannot resolve host {alias!r}: {exc}") from exc

    def resolve(self, spec: HostSpec) -> Endpoint:
        return self._resolve(spec.address, spec.user, spec.port, spec.identity_file, depth=0)

    def _resolve(
        self,
        alias: str,
        user: str | None,
        port: int | None,
        identity: str | None,
        depth: int,
    ) -> Endpoint:
        if depth > 8:
            raise SshConfigError(f"ProxyJump chain through {alias!r} is deeper than 8 hops")
        found = self.lookup(alias)
        hostname = str(found.get("hostname", alias))
        if port is None:
            port = _port(found.get("port"), alias, self.path)
        if user is None:
            user = str(found.get("user") or _login_name())
        identity_files: list[str] = []
        if identity:
            identity_files.append(str(expand_home(identity)))
        for entry in found.get("identityfile", []) or []:
            expanded = str(expand_home(str(entry)))
            if expanded not in identity_files:
                identity_files.append(expanded)
        timeout = _seconds(found.get("connecttimeout"), "ConnectTimeout", alias, self.path)
        jumps: list[Endpoint] = []
        proxy = found.get("proxyjump")
        if proxy and str(proxy).lower() != "none":
            for hop in str(proxy).split(","):
                hop_user, hop_host, hop_port = _split_jump(hop.strip(), alias, self.path)
                hop_endpoint = self._resolve(hop_host, hop_user, hop_port, None, depth + 1)
                jumps.extend(hop_endpoint.proxy_jump)
                jumps.append(dataclasses.replace(hop_endpoint, proxy_jump=()))
        return Endpoint(
            hostname=hostname,
            port=port,
            user=user,
            identity_files=tuple(identity_files),
            host_key_alias=str(found["hostkeyalias"]) if found.get("hostkeyalias") else None,
            connect_timeout=timeout,
            proxy_jump=tuple(jumps),
            user_known_hosts=_files(found.get("userknownhostsfile")),
            global_known_hosts=_files(found.get("globalknownhostsfile")),
            strict_host_key_checking=_strict(found.get("stricthostkeychecking"), alias,
                                             self.path),
            identities_only=str(found.get("identitiesonly", "no")).lower() == "yes",
            server_alive_interval=_seconds(found.get("serveraliveinterval"),
                                           "ServerAliveInterval", alias, self.path),
        )


def _login_name() -> str:
    """The default user as ssh takes it: the password database's, not $USER."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return getpass.getuser()


def _files(value: object) -> tuple[str, ...]:
    """A known-hosts file list (space-separated, `~` from the password database)."""
    if not value:
        return ()
    words = value if isinstance(value, list) else str(value).split()
    return tuple(str(expand_home(str(w))) for w in words if str(w).lower() != "none")


def _strict(value: object, alias: str, path: Path | None) -> str | None:
    if value is None:
        return None
    text = str(value).lower()
    if text in ("yes", "accept-new", "no", "off", "ask"):
        return "yes" if text == "ask" else text  # nobody is there to ask: as `yes`
    raise SshConfigError(f"{path or 'ssh config'}: StrictHostKeyChecking {value!r} for "
                         f"{alias!r} is not yes, accept-new or no")


def _seconds(value: object, what: str, alias: str, path: Path | None) -> float | None:
    if value is None:
        return None
    text = str(value)
    if not text.isdigit() or not 0 < int(text) <= 86400:
        raise SshConfigError(f"{path or 'ssh config'}: {what} {text!r} for {alias!r} is not "
                             "1-86400 seconds")
    return float(text)


def _port(value: object, alias: str, path: Path | None) -> int:
    if value is None:
        return 22
    text = str(value)
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise SshConfigError(f"{path or 'ssh config'}: Port {text!r} for {alias!r} is not 1-65535")
    return int(text)


def _split_jump(hop: str, alias: str, path: Path | None) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` from a ProxyJump list (ssh:// URIs too)."""
    if hop.startswith("ssh://"):
        hop = hop[len("ssh://") :]
    user, _, rest = hop.rpartition("@")
    host, port_text = rest, None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    if not host:
        raise SshConfigError(f"{path or 'ssh config'}: bad ProxyJump {hop!r} for {alias!r}")
    port = _port(port_text, alias, path) if port_text else None
    return user or None, host, port
