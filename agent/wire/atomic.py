"""Replacing a small file whole: the one way the agent (and the hook, and the cockpit when
it likes) writes a state file, a ledger, a marker or a status that another process, or
the same one after a crash, reads back.

The text goes to a temporary file beside the target (same directory, so the rename
stays on one filesystem), is flushed and fsynced, and is renamed over the target; then
the directory is fsynced so the rename itself survives a power loss. A reader sees the
old file or the new one, never half of one, and a writer killed midway leaves only a
hidden `.NAME.PID.TID.tmp`, which no reader looks at.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


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
