"""Replacing a small file whole: the one way the agent (and the hook, and the cockpit when
it likes) writes a state file, a ledger, a marker or a status that another process, or
the same one after a crash, reads back.

The text goes to a temporary file beside the target (same directory, so the rename
stays on one filesystem), is flushed and fsynced, and is renamed over the target; then
the directory is fsynced so the rename itself survives a power loss. A reader sees the
old file or the new one, never half of one, and a writer killed midway leaves only a
hidden `.NAME.PID.TID.tmp`, which no reader looks at.

A file that grows by lines another process reads (a job's control file) is appended to
with `append_line`: one write per line, and never a line glued to what a failed one left.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from typing import BinaryIO, Dict, Union

PathLike = Union[str, "os.PathLike[str]"]

# Appends to one file from this process's threads (the daemon's adjusts, a job's pause)
# take turns, so that no other append comes between the look at how the file ends and
# the write after it. One lock per file: a file on a hung mount holds up only its own.
_APPENDING: Dict[str, threading.Lock] = {}
_APPENDING_LOCK = threading.Lock()


def fsync_dir(directory: PathLike) -> None:
    """Make a rename or a creation in `directory` durable, where the platform can."""
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and platforms) cannot sync a directory
    finally:
        os.close(fd)


def write_text(path: PathLike, text: str, encoding: str = "utf-8",
               durable: bool = True) -> None:
    """Replace `path` with `text` atomically; raises OSError. `durable=False` leaves out
    the fsyncs, for a ledger rewritten many times a second whose loss costs nothing but
    a little repeated work (still never half a file)."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, ".%s.%d.%d.tmp" % (name, os.getpid(), threading.get_ident()))
    try:
        with open(tmp, "w", encoding=encoding) as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory or ".")


def private_dir(path: PathLike) -> None:
    """Create `path` (and its parents) for this user alone, or take an existing one that
    is this user's, without group or other write permission (removed if it had any).

    The agent's state dir holds its control inbox, whose ops it carries out (a launch
    runs a command): a directory another user owns or may write lets them put their own
    inbox there. One that belongs to another user is refused (OSError, EPERM)."""
    os.makedirs(os.fspath(path), mode=0o700, exist_ok=True)
    status = os.stat(path)  # a symlink's target: the directory the agent then uses
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None and status.st_uid != uid:
        raise OSError(errno.EPERM, "%s belongs to uid %d, not to this user (uid %d): another "
                      "user could write the agent's control inbox there; use a state dir "
                      "of your own" % (os.fspath(path), status.st_uid, uid))
    if status.st_mode & 0o022:
        os.chmod(path, stat.S_IMODE(status.st_mode) & ~0o022)


def append_line(path: PathLike, line: bytes, mode: int = 0o666,
                fresh_line: bool = False) -> None:
    """Append one line to `path` (made when missing, with `mode` less the umask) in one
    `os.write` on an O_APPEND descriptor, so that appenders never mix their lines.

    The line begins a line of its own: where the file does not end in a newline (an
    earlier append was cut short, here or in another process) a newline goes first, so
    that what the failed append left stays one malformed line and this one is whole;
    `fresh_line` puts one there regardless. A short or failed write raises OSError: the
    line is not there whole, and the caller must not report it written. What it left is
    ended with a newline at once where the disk allows, else by the next append."""
    if not line.endswith(b"\n"):
        line += b"\n"
    target = os.path.abspath(os.fspath(path))
    with _APPENDING_LOCK:
        turn = _APPENDING.setdefault(target, threading.Lock())
    with turn:
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)
        try:
            data = b"\n" + line if fresh_line or not _ends_a_line(fd) else line
            try:
                written = os.write(fd, data)
            except OSError:
                _end_line(fd)
                raise
            if written < len(data):
                _end_line(fd)
                raise OSError(errno.ENOSPC, "%s: only %d of the %d bytes of a line were "
                              "written" % (target, written, len(data)))
        finally:
            os.close(fd)


def _ends_a_line(fd: int) -> bool:
    """Whether the file is empty or ends in a newline; False when that cannot be read
    (a newline too many makes an empty line, which readers skip)."""
    try:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"
    except OSError:
        return False


def _end_line(fd: int) -> None:
    """After a failed append: end what it left with a newline, if the disk allows."""
    if not _ends_a_line(fd):
        try:
            os.write(fd, b"\n")
        except OSError:
            pass  # the next append begins with it


def open_regular(path: PathLike, follow: bool = True) -> BinaryIO:
    """`path` opened for reading in binary, an OSError where it is not a regular file: a
    FIFO's open would block the reader until a writer came (opened without blocking to
    find out). `follow=False`: a symbolic link is refused too (ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(os.fspath(path), flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("%s is not a regular file" % os.fspath(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
