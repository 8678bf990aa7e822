"""Which trainer rank a process is, when nobody told us.

The supervisor knows the ranks of the processes it started and the spool headers name
the trainer pids; for anything else (a job started by hand) the rank is read from the
process environment, the same `RANK` torchrun sets. Unreadable means unknown (None).
"""

from __future__ import annotations

from typing import Dict, Optional


def rank_from_environ(pid: int) -> Optional[int]:
    """`RANK` from /proc/PID/environ (psutil when present, else /proc directly)."""
    value = None
    try:
        import psutil

        try:
            value = psutil.Process(pid).environ().get("RANK")
        except (psutil.Error, OSError):
            return None
    except ImportError:
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"RANK="):
                        value = item[5:].decode("ascii", "replace")
                        break
        except OSError:
            return None
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


class RankResolver:
    """pid -> rank with a per-pid cache (a process's environment does not change)."""

    def __init__(self, limit: int = 4096) -> None:
        self._cache: Dict[int, Optional[int]] = {}
        self._limit = limit

    def __call__(self, pid: int, known: Optional[Dict[int, Optional[int]]] = None
                 ) -> Optional[int]:
        if known and known.get(pid) is not None:
            return known[pid]
        if pid not in self._cache:
            if len(self._cache) >= self._limit:
                self._cache.clear()
            self._cache[pid] = rank_from_environ(pid)
        return self._cache[pid]
