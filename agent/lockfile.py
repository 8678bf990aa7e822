"""One daemon per state dir, enforced by an advisory lock the kernel drops on any exit.

`flock` (not a pid file) so that a daemon killed with -9 never leaves a stale lock
behind; the pid written inside is only for messages.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Optional


class LockHeld(Exception):
    def __init__(self, path: Path, pid: Optional[int]) -> None:
        self.path = path
        self.pid = pid
        who = "pid %d" % pid if pid else "another process"
        super().__init__("another cockpit-agent daemon (%s) is running for %s"
                         % (who, path.parent))


def lock_path(state_dir: Path) -> Path:
    return Path(state_dir) / "agent.lock"


def _read_pid(path: Path) -> Optional[int]:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


class StateLock:
    """Held for the daemon's whole life; `acquire` raises `LockHeld` when taken."""

    def __init__(self, state_dir: Path) -> None:
        self.path = lock_path(state_dir)
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o644)
        # A few tries: `running_daemon` in a stream or status briefly takes a shared lock.
        for attempt in range(5):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 4:
                    os.close(fd)
                    raise LockHeld(self.path, _read_pid(self.path)) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, b"%d\n" % os.getpid())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def running_daemon(state_dir: Path) -> Optional[int]:
    """Pid of the daemon holding the state dir (0 if unknown), None when none runs."""
    path = lock_path(state_dir)
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(path) or 0
    finally:
        os.close(fd)  # closing drops a lock we may have taken
    return None
