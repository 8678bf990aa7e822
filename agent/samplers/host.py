"""The host's own resources and the job's processes, through psutil.

Rates (disk and network bytes/s, CPU %) are differences between two samples, so the
first sample reports them as None (n/a) rather than a made-up zero. Without psutil the
sampler says so (`available` is False) and samples only load and disk, the rest None.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple


def load_psutil() -> Optional[Any]:
    try:
        import psutil

        return psutil
    except ImportError:
        return None


def _load_average() -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """1, 5 and 15-minute load, or None each where the platform has none to give."""
    try:
        return os.getloadavg()
    except (OSError, AttributeError):
        return None, None, None


class HostSampler:
    """`host` record bodies for one filesystem (the run dir's) and one job's processes."""

    def __init__(self, disk_path: Path, psutil_module: Any = None,
                 clock: Callable[[], float] = time.monotonic,
                 load: Callable[[], Optional[Any]] = load_psutil) -> None:
        self.psutil: Any = psutil_module if psutil_module is not None else load()
        self.available = self.psutil is not None
        self.disk_path = str(disk_path)
        self._clock = clock
        self._mount, self._device = self._find_mount()
        self._prev: Dict[str, Tuple[float, float]] = {}  # counter -> (time, value)
        self._procs: Dict[int, Any] = {}
        self._cpu_primed = False

    def _find_mount(self) -> Tuple[str, Optional[str]]:
        if not self.available:
            return self.disk_path, None
        path = os.path.realpath(self.disk_path)
        best, device = "/", None
        try:
            partitions = self.psutil.disk_partitions(all=True)
        except Exception:
            partitions = []
        for part in partitions:
            mount = part.mountpoint
            inside = path == mount or path.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best):
                best, device = mount, part.device
        return best, device

    def _rate(self, name: str, value: Optional[float], now: float) -> Optional[float]:
        if value is None:
            return None
        prev = self._prev.get(name)
        self._prev[name] = (now, value)
        if prev is None or now <= prev[0] or value < prev[1]:
            return None
        return (value - prev[1]) / (now - prev[0])

    def sample(self, pid_ranks: Optional[Mapping[int, Optional[int]]] = None) -> Optional[dict]:
        if not self.available:
            return self._without_psutil()
        ps = self.psutil
        now = self._clock()
        cpu = ps.cpu_percent(interval=None)
        cpu_value = cpu if self._cpu_primed else None
        self._cpu_primed = True
        load1, load5, load15 = _load_average()
        mem = ps.virtual_memory()
        swap = ps.swap_memory()
        try:
            usage = ps.disk_usage(self.disk_path)
            disk_used, disk_total = usage.used, usage.total
        except OSError:
            disk_used = disk_total = None
        read, write = self._disk_io()
        rx, tx = self._net_io()
        return {
            "cpu": cpu_value,
            "load1": load1, "load5": load5, "load15": load15,
            "mem_used": mem.total - mem.available, "mem_total": mem.total,
            "swap_used": swap.used, "swap_total": swap.total,
            "disk_path": self._mount,
            "disk_used": disk_used, "disk_total": disk_total,
            "disk_read": self._rate("disk_read", read, now),
            "disk_write": self._rate("disk_write", write, now),
            "net_rx": self._rate("net_rx", rx, now),
            "net_tx": self._rate("net_tx", tx, now),
            "procs": self._job_procs(pid_ranks or {}),
        }

    def _without_psutil(self) -> dict:
        """What the standard library gives (load, the disk), the rest None: a host with
        no psutil and no GPU still sends a record every interval, so its link never
        goes stale for want of anything to say."""
        load1, load5, load15 = _load_average()
        disk_used: Optional[int] = None
        disk_total: Optional[int] = None
        try:
            usage = shutil.disk_usage(self.disk_path)
            disk_used, disk_total = usage.used, usage.total
        except OSError:
            pass  # the record says None: no figure for a disk it cannot read
        return {
            "cpu": None, "load1": load1, "load5": load5, "load15": load15,
            "mem_used": None, "mem_total": None, "swap_used": None, "swap_total": None,
            "disk_path": self._mount, "disk_used": disk_used, "disk_total": disk_total,
            "disk_read": None, "disk_write": None, "net_rx": None, "net_tx": None,
            "procs": [],
        }

    def _disk_io(self) -> Tuple[Optional[float], Optional[float]]:
        try:
            per_disk = self.psutil.disk_io_counters(perdisk=True) or {}
            name = os.path.basename(self._device or "")
            counters = per_disk.get(name) or self.psutil.disk_io_counters()
        except Exception:
            return None, None
        if counters is None:
            return None, None
        return float(counters.read_bytes), float(counters.write_bytes)

    def _net_io(self) -> Tuple[Optional[float], Optional[float]]:
        try:
            per_nic = self.psutil.net_io_counters(pernic=True) or {}
        except Exception:
            return None, None
        nics = [c for name, c in per_nic.items() if name != "lo"]
        if not nics:
            return None, None
        return float(sum(c.bytes_recv for c in nics)), float(sum(c.bytes_sent for c in nics))

    def _job_procs(self, pid_ranks: Mapping[int, Optional[int]]) -> List[dict]:
        ps = self.psutil
        out = []
        alive = {}
        for pid in sorted(pid_ranks):
            proc: Any = self._procs.get(pid)
            first = proc is None
            try:
                if first:
                    proc = ps.Process(pid)
                with proc.oneshot():
                    cpu = proc.cpu_percent(interval=None)
                    rss = proc.memory_info().rss
                    state = proc.status()
                    try:
                        fds = proc.num_fds()
                    except (AttributeError, ps.AccessDenied):
                        fds = None
            except (ps.NoSuchProcess, ps.ZombieProcess):
                continue
            except ps.AccessDenied:
                out.append({"pid": pid, "rank": pid_ranks[pid], "cpu": None, "rss": None,
                            "state": "access denied", "fds": None})
                continue
            alive[pid] = proc
            out.append({"pid": pid, "rank": pid_ranks[pid], "cpu": None if first else cpu,
                        "rss": rss, "state": state, "fds": fds})
        self._procs = alive
        return out
