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

import os
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
