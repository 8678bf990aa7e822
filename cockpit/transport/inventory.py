"""Which hosts the cockpit watches: a TOML inventory file or `user@host[:port]` targets.

A typo in an inventory of two hundred hosts must point at the line to fix, so every
error names the file, the line and the field. TOML syntax errors come with tomllib's own
line and column; for semantic errors the key's line is found by scanning the file text.

A host's name is shown on every screen and report, so it is checked whether it was
written or taken from the address; no text field may hold a control character (an
escape sequence would reach the operator's terminal). Two entries that reach the same
agent (the same address, port, user and state dir) are refused: each would stream it,
and every record would be stored twice under two names.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately
    import tomli as tomllib

from agent.wire.paths import DEFAULT_STATE_DIR
from cockpit.printable import UNSAFE

AUTO_AGENT = "auto"
DEFAULT_DEPLOY_DIR = "~/.cache/cockpit-agent"
LOCAL_ADDRESS = "local"


class InventoryError(ValueError):
    """Bad inventory input; the message names where (file:line) and which field."""


@dataclass(frozen=True)
class HostSpec:
    """One host to watch, as the operator described it.

    `address` may be an ~/.ssh/config alias; `user` and `port` left as None are taken
    from the SSH config, then from OpenSSH's defaults. `agent` is the remote command
    (a shell-style string split into argv) or "auto": run `cockpit-agent` when the host
    has it, otherwise push the single-file agent to `deploy_dir` and run it with `python`.
    """

    name: str
    address: str
    user: str | None = None
    port: int | None = None
    python: str = "python3"
    agent: str = AUTO_AGENT
    state_dir: str = DEFAULT_STATE_DIR
    run_dirs: tuple[str, ...] = ()
    spare: bool = False
    identity_file: str | None = None
    deploy_dir: str = DEFAULT_DEPLOY_DIR

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL_ADDRESS


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostSpec, ...]
    source: str = "<command line>"

    def by_name(self) -> dict[str, HostSpec]:
        return {host.name: host for host in self.hosts}

    @property
    def active(self) -> tuple[HostSpec, ...]:
        return tuple(h for h in self.hosts if not h.spare)

    @property
    def spares(self) -> tuple[HostSpec, ...]:
        return tuple(h for h in self.hosts if h.spare)


@dataclass(frozen=True)
class _Field:
    kind: type | tuple[type, ...]
    describe: str


_FIELDS: dict[str, _Field] = {
    "name": _Field(str, "a string"),
    "address": _Field(str, "a string (address or ~/.ssh/config alias)"),
    "user": _Field(str, "a string"),
    "port": _Field(int, "an integer 1-65535"),
    "python": _Field(str, "a string (the host's interpreter)"),
    "agent": _Field(str, 'a string (a command, or "auto")'),
    "state_dir": _Field(str, "a string (a path on the host)"),
    "run_dirs": _Field(list, "a list of strings (paths on the host)"),
    "spare": _Field(bool, "true or false"),
    "identity_file": _Field(str, "a string (a private key path)"),
    "deploy_dir": _Field(str, "a string (a path on the host)"),
}
_DEFAULTABLE = set(_FIELDS) - {"name", "address"}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*$")
# What no text field may hold: C0 and C1 controls, DEL, bidi controls (U+202E shows
# the rest of a line reversed) and lone surrogates, what a terminal would act on.
_CONTROL_RE = UNSAFE


def _name_ok(name: str) -> bool:
    """A host name the screens can show as it is: `_NAME_RE`, or an IPv6 address."""
    return bool(_NAME_RE.match(name) or _IPV6_RE.match(name))


def load_inventory(path: str | Path) -> Inventory:
    """Parse an inventory file, or raise `InventoryError` pointing at the bad line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read inventory: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InventoryError(f"{path}:{line}: inventory is not UTF-8 text ({exc.reason})"
                             ) from None
    return parse_inventory(text, str(path))


def parse_inventory(text: str, source: str = "<inventory>") -> Inventory:
    # Over 80 lines: one pass over the file, each check beside the error (with its line)
    # it raises.
    # Editors on Windows save a byte-order mark that TOML does not allow; it says nothing.
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{source}: invalid TOML: {exc}") from exc
    locator = _Locator(text, source)
    unknown_top = sorted(set(data) - {"defaults", "hosts"})
    if unknown_top:
        key = unknown_top[0]
        raise InventoryError(
            f"{locator.where(key=key)}: unknown top-level key {key!r} "
            "(expected [defaults] and [[hosts]])"
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InventoryError(f"{locator.where(key='defaults')}: 'defaults' must be a table")
    for key, value in defaults.items():
        if key not in _FIELDS:
            raise InventoryError(
                f"{locator.where('defaults', None, key)}: unknown field {key!r} in [defaults] "
                f"(known: {', '.join(sorted(_DEFAULTABLE))})"
            )
        if key not in _DEFAULTABLE:
            raise InventoryError(
                f"{locator.where('defaults', None, key)}: field {key!r} cannot be a default "
                f"(allowed: {', '.join(sorted(_DEFAULTABLE))})"
            )
        _check_value(locator, "defaults", None, key, value)
    hosts_raw = data.get("hosts")
    if isinstance(hosts_raw, dict):
        raise InventoryError(f"{locator.where(key='hosts')}: 'hosts' must be an array of "
                             "tables: write [[hosts]], once per host")
    if hosts_raw is not None and not isinstance(hosts_raw, list):
        raise InventoryError(f"{locator.where(key='hosts')}: 'hosts' must be an array of "
                             f"tables, got {_toml(hosts_raw)}: write [[hosts]], once per host")
    if not hosts_raw:
        raise InventoryError(f"{source}: no hosts: add at least one [[hosts]] table")
    hosts: list[HostSpec] = []
    seen: dict[str, int] = {}
    agents: dict[tuple[str, int | None, str | None, str], int] = {}
    for index, entry in enumerate(hosts_raw):
        if not isinstance(entry, dict):
            raise InventoryError(f"{locator.where(key='hosts')}: 'hosts' must be [[hosts]] tables")
        for key, value in entry.items():
            if key not in _FIELDS:
                raise InventoryError(
                    f"{locator.where('hosts', index, key)}: unknown field {key!r} in host "
                    f"#{index + 1} (known: {', '.join(sorted(_FIELDS))})"
                )
            _check_value(locator, "hosts", index, key, value)
        if "address" not in entry:
            raise InventoryError(
                f"{locator.where('hosts', index, None)}: host #{index + 1} has no 'address'"
            )
        merged: dict[str, Any] = {**defaults, **entry}
        spec = _spec_from(merged)
        if "name" not in entry and not _name_ok(spec.name):
            raise InventoryError(
                f"{locator.where('hosts', index, 'address')}: host #{index + 1} is named "
                f"after its address {_toml(spec.address)}, which is not a host name (letters, "
                "digits and . _ : @ -): give it a 'name'"
            )
        if spec.name in seen:
            raise InventoryError(
                f"{locator.where('hosts', index, 'name' if 'name' in entry else 'address')}: "
                f"duplicate host name {spec.name!r} (first used by host #{seen[spec.name] + 1})"
            )
        seen[spec.name] = index
        agent = (spec.address, spec.port, spec.user, spec.state_dir)
        if agent in agents:
            raise InventoryError(
                f"{locator.where('hosts', index, 'address')}: host #{index + 1} reaches the "
                f"same agent as host #{agents[agent] + 1} (address {_toml(spec.address)}, "
                "same port, user and state_dir): it would be streamed twice; remove one, "
                "or give each its own state_dir"
            )
        agents[agent] = index
        hosts.append(spec)
    return Inventory(tuple(hosts), source)


def parse_targets(targets: Iterable[str], defaults: Mapping[str, Any] | None = None) -> Inventory:
    """Hosts given on the command line as `[user@]host[:port]` (IPv6 as `[addr]:port`)."""
    defaults = dict(defaults or {})
    hosts: list[HostSpec] = []
    split = [(raw.strip(), *_split_target(raw.strip())) for raw in targets]
    # One host is one machine, named by its address; two users on it run two agents
    # (each with its own state dir), so each is a host of its own, named user@address.
    seen: dict[tuple[str, int | None, str | None], str] = {}
    for target, user, address, port in split:
        if (address, port, user) in seen:
            raise InventoryError(f"host {target!r} is given twice on the command line "
                                 f"(first as {seen[address, port, user]!r})")
        seen[address, port, user] = target
    for target, user, address, port in split:
        name = address if port is None else f"{address}:{port}"
        if not _name_ok(address) or (user is not None and not _name_ok(user)):
            raise InventoryError(f"bad host target {_toml(target)}: a host target holds "
                                 "only letters, digits and . _ : @ - (write an inventory "
                                 "file to name a host otherwise)")
        if user is not None and sum(k[:2] == (address, port) for k in seen) > 1:
            name = f"{user}@{name}"
        elif user is None and sum(k[:2] == (address, port) for k in seen) > 1:
            raise InventoryError(f"host {target!r} is given with and without a user: give "
                                 "each target on that host its user")
        fields: dict[str, Any] = {**defaults, "address": address, "name": name}
        if user is not None:
            fields["user"] = user
        if port is not None:
            fields["port"] = port
        hosts.append(_spec_from(fields))
    if not hosts:
        raise InventoryError("no hosts given: pass user@host[:port] targets or an inventory file")
    return Inventory(tuple(hosts))


_TARGET_RE = re.compile(
    r"^(?:(?P<user>[^@\s/]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^@:\s\[\]/]+))"
    r"(?::(?P<port>[^:]*))?$"
)


def _split_target(target: str) -> tuple[str | None, str, int | None]:
    match = _TARGET_RE.match(target)
    if not match and "/" in target:
        raise InventoryError(f"{target!r} is neither an inventory file (no such file) nor a "
                             "host target ([user@]host[:port])")
    if not match:
        raise InventoryError(
            f"bad host target {target!r}: expected [user@]host[:port] (IPv6: [addr]:port)"
        )
    address = match.group("v6") or match.group("host")
    if address.startswith("-") or (match.group("user") or "").startswith("-"):
        raise InventoryError(f"bad host target {target!r}: a user or host may not start with "
                             "'-' (ssh would read it as an option)")
    port_text = match.group("port")
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise InventoryError(f"bad host target {target!r}: port {port_text!r} is not 1-65535")
        port = int(port_text)
    return match.group("user"), address, port


def _spec_from(fields: dict[str, Any]) -> HostSpec:
    address = fields["address"]
    values = {k: v for k, v in fields.items() if k in _FIELDS}
    values.setdefault("name", address)
    if "run_dirs" in values:
        values["run_dirs"] = tuple(values["run_dirs"])
    return HostSpec(**values)


def _check_value(locator: _Locator, table: str, index: int | None, key: str, value: Any) -> None:
    spec = _FIELDS[key]
    where = locator.where(table, index, key)
    # bool is an int in Python: a port of `true` must still be refused.
    wrong_type = not isinstance(value, spec.kind) or (spec.kind is int and isinstance(value, bool))
    if wrong_type:
        raise InventoryError(f"{where}: field {key!r} must be {spec.describe}, got "
                             f"{_toml(value)}")
    if key == "port" and not 1 <= value <= 65535:
        raise InventoryError(f"{where}: field 'port' must be 1-65535, got {value}")
    if key == "run_dirs":
        bad = [v for v in value if not isinstance(v, str) or not v]
        if bad:
            raise InventoryError(f"{where}: field 'run_dirs' must hold non-empty path strings")
    if isinstance(value, str) and not value.strip():
        raise InventoryError(f"{where}: field {key!r} is empty")
    if key == "name" and not _NAME_RE.match(value):
        raise InventoryError(
            f"{where}: host name {value!r} may hold only letters, digits and . _ : @ -"
        )
    if isinstance(value, str) and _CONTROL_RE.search(value):
        raise InventoryError(f"{where}: field {key!r} holds a control character "
                             "(newline, NUL, escape, bidi override…)")
    if key == "run_dirs" and any(_CONTROL_RE.search(v) for v in value):
        raise InventoryError(f"{where}: field 'run_dirs' holds a control character")
    # Both reach ssh's command line and config: a space splits them, a leading '-' makes
    # an option of them (-oProxyCommand=...), an '@' in a user names another host.
    if key == "address" and (value.startswith("-") or any(c.isspace() for c in value)):
        raise InventoryError(f"{where}: address {_toml(value)} may not hold whitespace or "
                             "start with '-'")
    if key == "user" and (value.startswith("-") or "@" in value
                          or any(c.isspace() for c in value)):
        raise InventoryError(f"{where}: user {_toml(value)} may not hold '@' or whitespace "
                             "or start with '-'")


def _toml(value: Any) -> str:
    """A value as it is written in TOML (true, not True), for messages about the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # JSON escapes C0 controls itself; DEL, C1 and bidi controls and lone surrogates
        # as escapes too, as TOML reads them, so the message shows them as text.
        return _CONTROL_RE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                               json.dumps(value, ensure_ascii=False))
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "a table"
    return str(value)


class _Locator:
    """Finds the line of a key in the inventory text, for error messages."""

    _HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?\s*(?:#.*)?$")

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines = text.splitlines()
        # (line number, table name, is array-of-tables) for each header, in order.
        self.headers: list[tuple[int, str, bool]] = []
        for number, line in enumerate(self.lines, start=1):
            match = self._HEADER.match(line)
            if match:
                self.headers.append((number, match.group(1), line.lstrip().startswith("[[")))

    def where(self, table: str | None = None, index: int | None = None,
              key: str | None = None) -> str:
        line = self._find(table, index, key)
        return f"{self.source}:{line}" if line else self.source

    def _span(self, table: str | None, index: int | None) -> tuple[int, int] | None:
        if table is None:
            end = self.headers[0][0] if self.headers else len(self.lines) + 1
            return 1, end
        matches = [i for i, (_, name, _array) in enumerate(self.headers) if name == table]
        if index is not None:
            matches = [i for i in matches if self.headers[i][2]]
            if index >= len(matches):
                return None
            pick = matches[index]
        else:
            if not matches:
                return None
            pick = matches[0]
        start = self.headers[pick][0]
        end = self.headers[pick + 1][0] if pick + 1 < len(self.headers) else len(self.lines) + 1
        return start, end

    def _find(self, table: str | None, index: int | None, key: str | None) -> int | None:
        span = self._span(table, index)
        if span is None:
            span = self._span(None, None) if table is None else None
            if span is None:
                return None
        start, end = span
        if key is not None:
            pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
            for number in range(start, end):
                if pattern.match(self.lines[number - 1]):
                    return number
            if table is None:
                header = re.compile(rf"^\s*\[\[?\s*{re.escape(key)}\s*\]")
                for number, line in enumerate(self.lines, start=1):
                    if header.match(line):
                        return number
            else:
                # A sub-table of this table (`[hosts.extra]` after a `[[hosts]]`).
                sub = f"{table}.{key}"
                for number, name, _array in self.headers:
                    if name == sub and number >= start:
                        return number
        return start if table is not None else None


__all__ = [
    "AUTO_AGENT",
    "DEFAULT_DEPLOY_DIR",
    "DEFAULT_STATE_DIR",
    "HostSpec",
    "Inventory",
    "InventoryError",
    "load_inventory",
    "parse_inventory",
    "parse_targets",
]
