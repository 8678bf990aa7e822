"""Reading a recording while a live cockpit writes it: a Unix socket beside the file.

DuckDB lets no other process open a file one process writes. A live session (`watch`,
`demo`, `run`) therefore listens on `REC.duckdb.sock` (mode 0600; the peer's uid is
checked too, so only the owner is served). A reader that finds the socket sends one JSON
line, `{"op": "snapshot", "dir": D}` with D a private directory it made (mode 0700, its
own); the live process copies what is committed into `D/snapshot.duckdb`
(`cockpit.store.snapshot_copy`) and answers one JSON line, `{"ok": true, "path": …,
"bytes": …, "seconds": …}` or `{"ok": false, "error": …}`. The reader opens the copy
read-only and removes D afterwards, whatever happened. Both lines are bounded
(`REQUEST_MAX`, `REPLY_MAX`), and so is every wait.

The socket is removed when the session ends. One left by a cockpit that was killed is
stale: nobody accepts on it. A reader takes a refused connection for "no live cockpit"
and opens the file itself; the next session on the recording replaces it (it holds the
file's write lock, so no other session can be serving it). See docs/recordings.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from cockpit.store.database import Store, StoreError
from cockpit.store.snapshot_copy import SnapshotCopier

log = logging.getLogger(__name__)

SOCKET_SUFFIX = ".sock"
SNAPSHOT_NAME = "snapshot.duckdb"
REQUEST_MAX = 4096  # bytes of the request line
REPLY_MAX = 16384  # bytes of the reply line
REQUEST_TIMEOUT_S = 5.0  # for the reader to send its line once connected
CONNECT_TIMEOUT_S = 5.0
# A copy of a large recording takes a while (DuckDB copies ~100s of MB/s on one thread);
# a reader waits this long for the answer before giving up.
REPLY_TIMEOUT_S = 600.0
ERROR_MAX = 500  # characters of an error text passed on
_SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes; longer paths go through /proc


def socket_path(recording: Path) -> Path:
    return Path(f"{recording}{SOCKET_SUFFIX}")


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for `path` that fits a sockaddr_un: the path itself, or for a long one
    the same file through an open handle on its directory (Linux's /proc/self/fd)."""
    if len(os.fsencode(str(path))) <= _SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _plain(text: object) -> str:
    """Text from the other end, as text: printable characters only, bounded."""
    s = "".join(c if c.isprintable() else "?" for c in str(text))
    return s if len(s) <= ERROR_MAX else s[: ERROR_MAX - 1] + "…"


def _read_line(conn: socket.socket, limit: int) -> bytes:
    """One line of at most `limit` bytes (the socket's timeout bounds each wait)."""
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"line longer than {limit} bytes")
    line, _, _ = buf.partition(b"\n")
    if len(line) > limit:
        raise ValueError(f"line longer than {limit} bytes")
    return line


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None  # not Linux: the socket's mode 0600 is the only guard
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


class SnapshotServer:
    """The live session's side: answers snapshot requests for `store`, one at a time,
    on a thread of its own, from `start()` to `stop()`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = socket_path(store.path)
        self._copier = SnapshotCopier(store)
        self._listener: socket.socket | None = None
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.problem: str | None = None  # why it does not serve, if it does not
        self.served = 0

    def start(self) -> SnapshotServer:
        try:
            self._listen()
        except OSError as exc:
            self.problem = f"no live snapshots at {self.path}: {exc.strerror or exc}"
            log.warning("%s", self.problem)
            return self
        self._thread = threading.Thread(target=self._serve, name="live-snapshots",
                                        daemon=True)
        self._thread.start()
        return self

    def _listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            found = self.path.lstat()
            if not stat.S_ISSOCK(found.st_mode):
                raise OSError(0, f"{self.path.name} exists and is not a socket (left as "
                                 "it is)")
            # Stale: this process holds the recording's write lock, so no live session
            # can be listening on it; a killed one left it.
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _address(self.path) as address:
                sock.bind(address)
            # Connections before the chmod are refused by the peer check all the same.
            os.chmod(self.path, 0o600)
            sock.listen(8)
            sock.settimeout(0.5)
        except OSError:
            sock.close()
            raise
        self._inode = self.path.lstat().st_ino
        self._listener = sock

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stopping.is_set():
                    self.problem = f"live snapshots at {self.path} stopped: {exc}"
                    log.warning("%s", self.problem)
                return
            with conn:
                try:
                    self._answer(conn)
                except (OSError, ValueError) as exc:  # a reader that went away, or sent junk
                    log.info("snapshot request: %s", exc)
                except Exception:  # one request's failure must not end the server for all
                    log.exception("snapshot request failed")

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_TIMEOUT_S)
        uid = _peer_uid(conn)
        if uid is not None and uid != os.getuid():
            self._reply(conn, {"ok": False, "error": "only the recording's owner may read "
                                                     "it through its live cockpit"})
            return
        try:
            request = json.loads(_read_line(conn, REQUEST_MAX))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            self._reply(conn, {"ok": False, "error": f"bad request: {_plain(exc)}"})
            return
        reply = self._snapshot(request)
        self._reply(conn, reply)

    def _snapshot(self, request: object) -> dict[str, object]:
        if not isinstance(request, dict) or request.get("op") != "snapshot":
            return {"ok": False, "error": "bad request: expected {\"op\": \"snapshot\", "
                                          "\"dir\": PATH}"}
        problem = _private_dir_problem(request.get("dir"))
        if problem is not None:
            return {"ok": False, "error": problem}
        try:
            done = self._copier.copy(Path(request["dir"]) / SNAPSHOT_NAME)
        except StoreError as exc:
            return {"ok": False, "error": _plain(exc)}
        self.served += 1
        log.info("snapshot of %s: %d bytes in %.2f s", self.store.path, done.bytes,
                 done.seconds)
        return {"ok": True, "path": str(done.path), "bytes": done.bytes,
                "seconds": round(done.seconds, 3)}

    def _reply(self, conn: socket.socket, reply: dict[str, object]) -> None:
        conn.sendall(json.dumps(reply).encode()[: REPLY_MAX - 1] + b"\n")

    def stop(self) -> None:
        """Stop listening, interrupt a copy in progress, remove the socket (when it is
        still this session's)."""
        self._stopping.set()
        self._copier.interrupt()
        if self._listener is not None:
            self._listener.close()
        if self._thread is not None:
            self._thread.join()
        if self._inode is not None:
            with contextlib.suppress(OSError):
                if self.path.lstat().st_ino == self._inode:
                    self.path.unlink()
        self._listener = self._thread = self._inode = None


def _private_dir_problem(value: object) -> str | None:
    """Why `value` is not a directory the requester made for itself alone, or None."""
    if not isinstance(value, str) or not value or len(value) > 1024 or "\0" in value:
        return "bad request: dir must be a path"
    path = Path(value)
    if not path.is_absolute():
        return "bad request: dir must be an absolute path"
    try:
        found = path.lstat()
    except OSError as exc:
        return f"{_plain(value)}: {exc.strerror}"
    if not stat.S_ISDIR(found.st_mode):
        return f"{_plain(value)} is not a directory"
    if found.st_uid != os.getuid() or found.st_mode & 0o077:
        return f"{_plain(value)} is not a private directory of this user (mode 0700)"
    return None


class LiveSnapshotError(StoreError):
    """A live cockpit answered but gave no snapshot (it said why)."""


def request_snapshot(recording: Path, into: Path,
                     timeout: float = REPLY_TIMEOUT_S) -> Path | None:
    """Ask the live cockpit writing `recording` for a copy in the private directory
    `into`; the copy's path, or None when no live cockpit listens (no socket, or a
    stale one). Raises LiveSnapshotError when one answers without a copy."""
    path = socket_path(recording)
    try:
        found = path.lstat()
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode):
        return None
    if found.st_uid != os.getuid():
        raise LiveSnapshotError(f"{path} belongs to another user: not asked for a copy")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            with _address(path) as address:
                sock.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            return None  # stale: left by a cockpit that was killed
        except OSError as exc:
            raise LiveSnapshotError(f"cannot reach the live cockpit at {path}: "
                                    f"{exc.strerror or exc}") from None
        try:
            sock.sendall(json.dumps({"op": "snapshot", "dir": str(into)}).encode() + b"\n")
            sock.settimeout(timeout)
            reply = json.loads(_read_line(sock, REPLY_MAX))
        except TimeoutError:
            raise LiveSnapshotError(f"the live cockpit writing {recording} gave no copy "
                                    f"within {timeout:g} s") from None
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise LiveSnapshotError(f"the live cockpit writing {recording} gave no copy: "
                                    f"{_plain(exc)}") from None
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        error = reply.get("error") if isinstance(reply, dict) else reply
        raise LiveSnapshotError(f"the live cockpit writing {recording} gave no copy: "
                                f"{_plain(error)}")
    copy = into / SNAPSHOT_NAME
    if reply.get("path") != str(copy) or not copy.is_file():
        raise LiveSnapshotError(f"the live cockpit writing {recording} answered with "
                                f"{_plain(reply.get('path'))}, not a copy in {into}")
    return copy


@contextlib.contextmanager
def readable_recording(recording: Path,
                       timeout: float = REPLY_TIMEOUT_S) -> Iterator[tuple[Path, bool]]:
    """(a file to open read-only, whether it is a live cockpit's copy): the copy while
    a live cockpit writes `recording`, else `recording` itself. The copy is removed on
    leaving."""
    into = Path(tempfile.mkdtemp(prefix="cockpit-read-"))  # mode 0700, this user's
    try:
        copy = request_snapshot(recording, into, timeout)
        yield (recording, False) if copy is None else (copy, True)
    finally:
        shutil.rmtree(into, ignore_errors=True)
