"""Host key trust: known_hosts files, refusal of unknown and changed keys.

The cockpit sends control ops that relaunch jobs, so a host must prove it is the machine
the operator trusted before. A key nobody has recorded is refused with the key type, its
SHA256 fingerprint and the exact ways to trust it; a key that differs from the recorded
one is refused loudly as a possible man-in-the-middle. Accepting new keys is an explicit
opt-in that records them in the cockpit's own known_hosts file.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
import pwd
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
import platformdirs

from cockpit.transport.states import HOSTKEY_CHANGED, HOSTKEY_UNKNOWN

SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
USER_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


def home_dir() -> Path:
    """The user's home as OpenSSH finds it: the password database, not $HOME (a
    `sudo -E` or a job runner's HOME must not change which keys are trusted)."""
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # a uid with no passwd entry (some containers): what is left
        return Path(os.path.expanduser("~"))


def expand_home(path: str | Path) -> Path:
    """`~` and `~/…` from `home_dir()`; any other path as given."""
    text = str(path)
    if text == "~" or text.startswith("~/"):
        return home_dir() / text[2:]
    return Path(text)


def cockpit_known_hosts() -> Path:
    """The file that `--accept-new-host-keys` appends to (kept apart from ~/.ssh)."""
    return Path(platformdirs.user_data_dir("training-cockpit")) / "known_hosts"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:…` fingerprint (what `ssh-keygen -lf` prints)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


class HostKeyError(Exception):
    """A host key the cockpit will not trust; `state` is the link state to report."""

    state = HOSTKEY_UNKNOWN


class HostKeyUnknown(HostKeyError):
    state = HOSTKEY_UNKNOWN


class HostKeyChanged(HostKeyError):
    state = HOSTKEY_CHANGED


class KnownHostsFile(paramiko.HostKeys):
    """One known_hosts file as paramiko reads it, whose keys for a host are found without
    comparing the name with every line.

    paramiko's `lookup` compares the name with every line, and for a hashed line
    (`|1|salt|hash`, what HashKnownHosts writes: the default on Debian and Ubuntu) it
    computes the line's HMAC through base64 round trips. In a file of 256 hashed lines one
    lookup took about 48 ms of CPU, so a fleet of 256 hosts spent 12 s looking its keys up
    (and 0.15 s in a plain file). Here plain names are a dict, and each hashed line's salt
    and digest are decoded once: a lookup costs one HMAC-SHA1 per hashed line. A hashed
    name that does not decode matches nothing (paramiko raised on every lookup; OpenSSH
    skips it).
    """

    def __init__(self, filename: str | None = None) -> None:
        self._plain: dict[str, list[int]] = {}
        self._hashed: list[tuple[int, bytes, bytes]] = []
        super().__init__(filename)

    def load(self, filename: str) -> None:
        super().load(filename)
        self.index()

    def index(self) -> None:
        """Build the index from the lines loaded (`load` does)."""
        self._plain = {}
        self._hashed = []
        for number, entry in enumerate(self._entries):
            for name in entry.hostnames:
                if not name.startswith("|1|"):
                    self._plain.setdefault(name, []).append(number)
                elif (decoded := _hashed_name(name)) is not None:
                    self._hashed.append((number, *decoded))

    def keys_for(self, name: str) -> dict[str, paramiko.PKey] | None:
        """{key type: key} recorded for `name`, each type's first line winning, as
        paramiko's `lookup` gives them; None when no line names it."""
        matches = set(self._plain.get(name, ()))
        if self._hashed and not name.startswith("|1|"):
            data = name.encode()
            matches.update(number for number, salt, digest in self._hashed
                           if hmac.compare_digest(hmac.digest(salt, data, "sha1"), digest))
        if not matches:
            return None
        keys: dict[str, paramiko.PKey] = {}
        for number in sorted(matches):
            key = self._entries[number].key
            if key is not None:
                keys.setdefault(key.get_name(), key)
        return keys


def _hashed_name(name: str) -> tuple[bytes, bytes] | None:
    """(salt, HMAC-SHA1 digest) of a `|1|salt|hash` name; None if it does not decode."""
    parts = name.split("|")
    if len(parts) != 4:
        return None
    try:
        salt, digest = base64.b64decode(parts[2], validate=True), base64.b64decode(
            parts[3], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(salt) != hashlib.sha1().digest_size or len(digest) != hashlib.sha1().digest_size:
        return None
    return salt, digest


@dataclass
class KnownHosts:
    """The known_hosts files consulted, in order, plus where new keys are recorded.

    Tests and sandboxed setups turn off the system and user files so that nothing
    outside the given files decides trust.
    """

    extra_files: Sequence[Path] = ()
    use_system: bool = True
    use_user: bool = True
    accept_new: bool = False
    record_file: Path = field(default_factory=cockpit_known_hosts)
    # An SSH config's UserKnownHostsFile / GlobalKnownHostsFile: read in place of
    # ~/.ssh/known_hosts / /etc/ssh/ssh_known_hosts, as ssh does.
    user_files: Sequence[Path] | None = None
    system_files: Sequence[Path] | None = None
    # StrictHostKeyChecking no: refused unless the operator allowed it by flag.
    allow_unchecked: bool = False
    unchecked: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Each file parsed once while it stays the same (path -> its stat signature and
    # keys): every link of a fleet consults the same files, and paramiko parses every
    # line of a file into key objects and checks it against all the lines before it. A
    # fleet of 256 hosts listed in one known_hosts file made that 256 parses of 256
    # lines, 66 k key objects held, and full garbage collections of a second or more.
    _parsed: dict[Path, tuple[tuple[int, int, int], KnownHostsFile]] = field(
        default_factory=dict, repr=False)

    def files(self) -> list[Path]:
        paths: list[Path] = []
        if self.system_files is not None:
            paths.extend(expand_home(p) for p in self.system_files)
        elif self.use_system:
            paths.append(SYSTEM_KNOWN_HOSTS)
        if self.user_files is not None:
            paths.extend(expand_home(p) for p in self.user_files)
        elif self.use_user:
            paths.append(expand_home(USER_KNOWN_HOSTS))
        paths.extend(expand_home(p) for p in self.extra_files)
        paths.append(expand_home(self.record_file))
        unique: list[Path] = []
        for path in paths:
            if path not in unique:
                unique.append(path)
        return unique

    def load_into(self, client: paramiko.SSHClient, name: str) -> None:
        """Give the client the keys recorded for `name` (`known_hosts_name`: what paramiko
        looks up) in every readable file, as loading the files in order would: for each
        key type the first file's key, in the order the files list them (paramiko asks
        the server for the first type)."""
        keys = client.get_host_keys()
        given: set[str] = set()
        for path in self.files():
            if not path.is_file():
                continue
            try:
                recorded = self._parse(path).keys_for(name)
            except (OSError, paramiko.SSHException) as exc:
                raise HostKeyError(f"cannot read known_hosts file {path}: {exc}") from exc
            if recorded is None:
                continue
            for key_type in recorded:
                if key_type not in given:
                    given.add(key_type)
                    keys.add(name, key_type, recorded[key_type])

    def _parse(self, path: Path) -> KnownHostsFile:
        """The keys of one file, parsed again only when the file has changed."""
        stat = path.stat()
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        # Parsed under the lock: a fleet's first wave of connects all find the cache
        # empty at once, and each parsing the file for itself was most of the cockpit's
        # CPU while 256 hosts connected. The others wait for the one parse and share it.
        with self._lock:
            cached = self._parsed.get(path)
            if cached is not None and cached[0] == signature:
                return cached[1]
            parsed = KnownHostsFile()
            parsed.load(str(path))
            self._parsed[path] = (signature, parsed)
        return parsed

    def record(self, name: str, key: paramiko.PKey) -> Path:
        """Append `name keytype base64` to the cockpit's own known_hosts file."""
        path = expand_home(self.record_file)
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            line = f"{name} {key.get_name()} {key.get_base64()}\n"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as handle:
                handle.write(line)
        return path

    def trust_file(self) -> Path:
        """Where an operator adds a key to trust: the file they named (--known-hosts),
        else their own known_hosts, else the cockpit's."""
        if self.extra_files:
            return expand_home(self.extra_files[0])
        if self.user_files:
            return expand_home(self.user_files[0])
        if self.use_user:
            return expand_home(USER_KNOWN_HOSTS)
        return expand_home(self.record_file)

    def for_config(self, user_files: Sequence[str] = (), system_files: Sequence[str] = (),
                   strict: str | None = None, accept_flag: bool | None = None) -> KnownHosts:
        """These settings as one host's SSH config entry changes them (it shares the
        parse cache and lock). `accept-new` records into the first UserKnownHostsFile
        when one is named, as ssh does; `--accept-new-host-keys` (the command line) wins
        over the config, as `ssh -o` does. `no` needs `allow_unchecked`."""
        changes: dict[str, Any] = {}  # KnownHosts fields, each of its own type
        if user_files:
            changes["user_files"] = tuple(Path(p) for p in user_files)
        if system_files:
            changes["system_files"] = tuple(Path(p) for p in system_files)
        mode = (strict or "").lower()
        if not self.accept_new:
            if mode == "accept-new":
                changes["accept_new"] = True
                if user_files:
                    changes["record_file"] = Path(user_files[0])
            elif mode in ("no", "off"):
                changes["unchecked"] = True
        if not changes:
            return self
        derived = dataclasses.replace(self, **changes)
        derived._lock, derived._parsed = self._lock, self._parsed
        return derived

    def policy(self, host_label: str, behind_jump: bool = False
               ) -> paramiko.MissingHostKeyPolicy:  # fmt: skip
        return _Policy(self, host_label, behind_jump)


class _Policy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only when no key at all is recorded for the host name."""

    def __init__(self, known: KnownHosts, host_label: str, behind_jump: bool = False) -> None:
        self.known = known
        self.host_label = host_label
        self.behind_jump = behind_jump

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        if self.known.unchecked:
            if self.known.allow_unchecked:
                return  # StrictHostKeyChecking no, allowed by flag: used, not recorded
            raise HostKeyUnknown(
                f"host {self.host_label} ({hostname}) presented an unknown {key.get_name()} "
                f"key {fingerprint(key)}; the SSH config says StrictHostKeyChecking no, "
                "which the cockpit refuses (it sends commands that start jobs). Use "
                "StrictHostKeyChecking accept-new, `cockpit hosts trust`, or pass "
                "--allow-unchecked-host-keys")
        if self.known.accept_new:
            self.known.record(hostname, key)
            return
        raise HostKeyUnknown(unknown_key_message(
            self.host_label, hostname, key, trust_in=self.known.trust_file(),
            recorded_in=expand_home(self.known.record_file), behind_jump=self.behind_jump))


def _split_name(name: str) -> tuple[str, int]:
    if name.startswith("[") and "]:" in name:
        host, port = name[1:].split("]:", 1)
        return host, int(port)
    return name, 22


def unknown_key_message(host_label: str, name: str, key: paramiko.PKey, *,
                        trust_in: Path | None = None, recorded_in: Path | None = None,
                        behind_jump: bool = False) -> str:
    address, port = _split_name(name)
    host, via, _ = host_label.partition(" via jump host ")
    if via:  # the jump host's own key: trust that host, by its address
        host = f"{address}:{port}" if port != 22 else address
    target = shlex.quote(str(trust_in)) if trust_in is not None else "~/.ssh/known_hosts"
    trust = f"`cockpit hosts trust {shlex.quote(host)}`"
    if behind_jump:  # ssh-keyscan from here cannot reach it
        how = f"{trust} (fetches it through the jump host; records it in {target})"
    else:
        keyscan = f"ssh-keyscan -p {port} {shlex.quote(address)} >> {target}"
        how = f"`{keyscan}` or {trust}"
    return (
        f"host {host_label} ({name}) presented an unknown {key.get_name()} host key "
        f"{fingerprint(key)}; refused. Check this fingerprint with the host's administrator "
        f"(on the host: ssh-keygen -lf /etc/ssh/ssh_host_{_short_type(key)}_key.pub), then "
        f"trust it with {how}, or start the cockpit with --accept-new-host-keys "
        f"(records it in {recorded_in or cockpit_known_hosts()})"
    )


def changed_key_message(
    host_label: str,
    name: str,
    presented: paramiko.PKey,
    expected: paramiko.PKey,
    files: Sequence[Path],
) -> str:
    where = ", ".join(str(p) for p in files if p.is_file()) or "known_hosts"
    return (
        f"HOST KEY CHANGED for {host_label} ({name}): it presented {presented.get_name()} "
        f"{fingerprint(presented)} but {expected.get_name()} {fingerprint(expected)} is recorded "
        f"in {where}. Someone may be intercepting the connection (man-in-the-middle), or "
        f"the host was reinstalled. Refused. If the change is expected, remove the old entry "
        f"with `ssh-keygen -R {shlex.quote(name)}` (and from {cockpit_known_hosts()}) and "
        "trust the new key."
    )


def _short_type(key: paramiko.PKey) -> str:
    name = key.get_name()
    if "ed25519" in name:
        return "ed25519"
    if "ecdsa" in name:
        return "ecdsa"
    if "rsa" in name:
        return "rsa"
    return name
