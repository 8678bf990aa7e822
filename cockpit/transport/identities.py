"""Private keys loaded once per cockpit, not once per connection.

paramiko loads the identity files again for every connection, and loading an RSA key
checks the key's arithmetic (about 0.2 s of CPU each, measured with cryptography 50 on
OpenSSL 3): a fleet of 256 hosts reached with one `id_rsa` spent about a minute of CPU
on that alone, which made connecting a CPU-bound crawl. A loaded key is kept while its
file (and its certificate, if any) stays the same.

A key file that paramiko cannot read as the class it tries (not a key, encrypted, or
simply another type: paramiko tries RSA, then ECDSA, then Ed25519 on every file it is
given) fails the same way on every attempt, at the same point in the handshake, with the
same error: that failure is kept too while the file stays the same, and raised again as
a fresh copy. Without it every connect with an ed25519 identity parsed the file twice in
vain, 15 % of the cockpit's CPU for a handshake. A missing or unreadable file is not
kept: paramiko does not move on from that one, and it is asked again each time.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable

import paramiko

# The key file's and its certificate's (mtime, size, inode).
_Signature = tuple[tuple[int, int, int], tuple[int, int, int] | None]
# (key file, key class, passphrase)
_Entry = tuple[str, type, str | None]


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class IdentityCache:
    """Keys as paramiko's `SSHClient._key_from_filepath` loads them, shared by links."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[_Entry, tuple[_Signature, paramiko.PKey | paramiko.SSHException]] = {}
        self._entry_locks: dict[_Entry, threading.Lock] = {}
        self.loads = 0  # keys actually read from disk (the rest came from here)
        self.failures = 0  # key files read from disk that did not load as the class tried

    def load(self, filename: str, klass: type, password: str | None,
             loader: Callable[[], paramiko.PKey]) -> paramiko.PKey:  # fmt: skip
        """The key `loader` reads from `filename` (a key or its `-cert.pub`), read again
        only when the key file or its certificate changed."""
        suffix = "-cert.pub"
        key_path = filename[: -len(suffix)] if filename.endswith(suffix) else filename
        key_sig = _signature(key_path)
        if key_sig is None:
            return loader()  # the loader raises what paramiko would, for that
        signature: _Signature = (key_sig, _signature(key_path + suffix))
        entry = (key_path, klass, password)
        with self._lock:
            entry_lock = self._entry_locks.setdefault(entry, threading.Lock())
        # One load per key at a time: a fleet's first wave of connects all find the
        # cache empty at once, and would otherwise each load (an RSA key: each 0.2 s).
        with entry_lock:
            with self._lock:
                cached = self._keys.get(entry)
            if cached is not None and cached[0] == signature:
                if isinstance(cached[1], paramiko.SSHException):
                    # A copy: one exception object raised from many threads would
                    # collect all their tracebacks.
                    raise copy.copy(cached[1])
                return cached[1]
            try:
                key = loader()
            except paramiko.SSHException as failed:
                with self._lock:
                    self._keys[entry] = (signature, copy.copy(failed))
                    self.failures += 1
                raise
            with self._lock:
                self._keys[entry] = (signature, key)
                self.loads += 1
            return key


class CachingClient(paramiko.SSHClient):
    """An `SSHClient` whose identity files come from an `IdentityCache`."""

    def __init__(self, identities: IdentityCache) -> None:
        super().__init__()
        self._identities = identities

    def _key_from_filepath(self, filename: str, klass: type,
                           password: str | None) -> paramiko.PKey:  # fmt: skip
        parent = super()._key_from_filepath
        return self._identities.load(filename, klass, password,
                                     lambda: parent(filename, klass, password))
