"""A job's processes as Linux shows them in /proc: its process group, the tree below a
pid, and whether a pid still runs.

torchrun starts each rank in a session of its own, so a signal to the job's process
group misses them: `agent.job.supervisor` collects the tree from here before its first
signal. /proc is read directly (psutil only where there is no /proc), since the job's
watcher asks every second and the agent runs with the standard library alone.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Optional, Set, Tuple


def _proc_stats(entries: List[str]) -> Iterator[Tuple[int, List[bytes]]]:
    """(pid, fields after the command name) of every readable /proc/PID/stat."""
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        yield int(name), stat[stat.rfind(b")") + 2 :].split()


def group_pids(pgid: int) -> List[int]:
    """Pids whose process group is `pgid` (Linux /proc; psutil elsewhere)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            import psutil

            return [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
        except ImportError:
            return [pgid]
    return sorted(pid for pid, fields in _proc_stats(entries)
                  if len(fields) > 2 and int(fields[2]) == pgid)


def _parents() -> Dict[int, List[int]]:
    children: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for pid, fields in _proc_stats(entries):
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(pid)
    return children


def descendants(pid: int) -> List[int]:
    """Every live descendant of `pid` (Linux /proc), children before grandchildren."""
    children = _parents()
    found: List[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def children_of(pid: int) -> List[int]:
    """Direct children of `pid`. The kernel's per-thread `children` lists answer without
    walking all of /proc (the watcher asks every second); the walk is the fallback."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        tasks = []
    found: Set[int] = set()
    try:
        for tid in tasks:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:  # no CONFIG_PROC_CHILDREN, or the process is gone: walk /proc
        return sorted(_parents().get(pid, []))
    if not tasks:
        return sorted(_parents().get(pid, []))
    return sorted(found)


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie (a zombie is dead, only not yet reaped)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
