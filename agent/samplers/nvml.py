"""NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py).

NVML is wrapped once, here: it is initialised lazily, every query goes through
`Nvml.query`, which answers None (n/a) instead of raising, and callers never see an
NVML exception. Fields that are slow to read or change rarely (ECC counters, retired
pages / remapped rows, NVLink error counters) are re-read at most every `ttl` seconds.
Without the library or the driver the wrapper settles into one explicit state
(`"pynvml not installed"`, `"no NVIDIA driver"`) and yields no records.

The module object is injectable so the wrapper can be exercised without a GPU.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from agent.samplers.procinfo import RankResolver
from agent.wire import states
from agent.wire.events import XID
from agent.wire.protocol import ALERT, EVENT

STATE_OK = states.GPU_OK
STATE_NO_DRIVER = states.GPU_NO_DRIVER
STATE_NO_PYNVML = states.GPU_NO_PYNVML
STATE_NO_GPUS = states.GPU_NO_GPUS

# NVML error codes meaning "there is no usable driver on this machine".
_NO_DRIVER_CODES = (9, 12)  # DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND
_TIMEOUT_CODE = 10
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
# The XID thread's waits after failures in a row (1, 2, 4... s, at most this): events
# wait in NVML's event set meanwhile, and a failure that repeats must not spin.
XID_RETRY_MAX = 10.0

# What an operator should try for the XIDs seen most in training clusters.
XID_HINTS = {
    13: "graphics engine exception: usually an application bug (bad kernel, OOB access)",
    31: "GPU memory page fault: usually an application bug; check the failing rank's log",
    43: "GPU stopped processing: the process was killed or hung; restart the rank",
    45: "preemptive cleanup after a fault: look at the XID just before this one",
    48: "double-bit ECC error: drain the GPU and reset it; replace it if it repeats",
    61: "internal micro-controller breakpoint: reset the GPU",
    62: "internal micro-controller halt: reset the GPU",
    63: "ECC page retirement / row remap recorded: reset the GPU when convenient",
    64: "ECC page retirement / row remap failed: drain and replace the GPU",
    74: "NVLink error: check cabling / NVSwitch; reset the GPUs on this link",
    79: "GPU has fallen off the bus: the host needs a reboot; check power and PCIe",
    92: "high single-bit ECC error rate: watch this GPU; plan a replacement",
    94: "contained ECC error: the affected process must restart; the GPU is usable",
    95: "uncontained ECC error: reset the GPU before reusing it",
}


def load_pynvml() -> Optional[Any]:
    try:
        import pynvml

        return pynvml
    except ImportError:
        return None


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Nvml:
    """One NVML session: lazy init, n/a-instead-of-exceptions queries, TTL cache."""

    def __init__(self, module: Any = None, ttl: float = 10.0,
                 fast_ttl: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 load: Callable[[], Optional[Any]] = load_pynvml) -> None:
        self._module = module
        self._load = load
        self.ttl = ttl
        self.fast_ttl = fast_ttl
        self._clock = clock
        self.state: Optional[str] = None
        self.detail = ""
        self.driver: Optional[str] = None
        self.handles: List[Any] = []
        self._cache: Dict[Tuple[int, str], Tuple[float, Any]] = {}
        self._ranks = RankResolver()
        self._lock = threading.Lock()

    @property
    def nvml(self) -> Any:
        return self._module

    def init(self) -> bool:
        """Initialise once; True when GPUs can be sampled."""
        with self._lock:
            if self.state is not None:
                return self.state == STATE_OK
            if self._module is None:
                self._module = self._load()
            if self._module is None:
                self.state = STATE_NO_PYNVML
                return False
            try:
                self._module.nvmlInit()
            except Exception as exc:  # NVMLError, or OSError from a broken library
                code = getattr(exc, "value", None)
                self.state = STATE_NO_DRIVER if code in _NO_DRIVER_CODES else (
                    "NVML error: %s" % exc)
                self.detail = str(exc)
                return False
            self.driver = _text(self.query("nvmlSystemGetDriverVersion"))
            count = self.query("nvmlDeviceGetCount") or 0
            self.handles = [self.query("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
            self.state = STATE_OK if self.handles else STATE_NO_GPUS
            return self.state == STATE_OK

    def shutdown(self) -> None:
        if self.state == STATE_OK:
            self.query("nvmlShutdown")

    def const(self, name: str, default: int) -> int:
        return getattr(self._module, name, default)

    def query(self, name: str, *args: Any) -> Any:
        """Call an NVML function; None when it is missing, unsupported or failing."""
        fn = getattr(self._module, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:  # NVMLError_NotSupported, NoPermission, GpuIsLost, ctypes errors
            return None

    def cached(self, index: int, key: str, ttl: float, read: Callable[[], Any]) -> Any:
        now = self._clock()
        hit = self._cache.get((index, key))
        if hit is not None and now - hit[0] < ttl:
            return hit[1]
        value = read()
        self._cache[(index, key)] = (now, value)
        return value

    # -- inventory and samples -------------------------------------------------------
    def inventory(self) -> List[dict]:
        if not self.init():
            return []
        gpus = []
        for index, handle in enumerate(self.handles):
            mem = self.query("nvmlDeviceGetMemoryInfo", handle)
            gpus.append({
                "index": index,
                "uuid": _text(self.query("nvmlDeviceGetUUID", handle)),
                "name": _text(self.query("nvmlDeviceGetName", handle)),
                "mem_total": getattr(mem, "total", None),
                "simulated": False,
            })
        return gpus

    def sample(self, pid_ranks: Optional[Mapping[int, Optional[int]]] = None) -> List[dict]:
        """One `gpu` record body per device (empty without NVML)."""
        if not self.init():
            return []
        known = dict(pid_ranks or {})
        return [self._device(index, handle, known) for index, handle in enumerate(self.handles)]

    def _device(self, index: int, h: Any, known: Dict[int, Optional[int]]) -> dict:
        q = self.query
        util = q("nvmlDeviceGetUtilizationRates", h)
        mem = q("nvmlDeviceGetMemoryInfo", h)
        power = q("nvmlDeviceGetPowerUsage", h)
        limit = q("nvmlDeviceGetEnforcedPowerLimit", h)
        if limit is None:
            limit = q("nvmlDeviceGetPowerManagementLimit", h)
        throttle = q("nvmlDeviceGetCurrentClocksEventReasons", h)
        if throttle is None:
            throttle = q("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        ecc = self.cached(index, "ecc", self.ttl, lambda: self._ecc(h))
        retired, pending = self.cached(index, "retired", self.ttl, lambda: self._retired(h))
        tx, rx = self.cached(index, "pcie", self.fast_ttl, lambda: (
            q("nvmlDeviceGetPcieThroughput", h, self.const("NVML_PCIE_UTIL_TX_BYTES", 0)),
            q("nvmlDeviceGetPcieThroughput", h, self.const("NVML_PCIE_UTIL_RX_BYTES", 1))))
        return {
            "gpu": index,
            "uuid": _text(self.cached(index, "uuid", 1e9, lambda: q("nvmlDeviceGetUUID", h))),
            "sim": False,
            "util": _float(getattr(util, "gpu", None)),
            "mem_util": _float(getattr(util, "memory", None)),
            "mem_used": getattr(mem, "used", None),
            "mem_total": getattr(mem, "total", None),
            "temp": _float(q("nvmlDeviceGetTemperature", h,
                             self.const("NVML_TEMPERATURE_GPU", 0))),
            "power": None if power is None else power / 1000.0,
            "power_limit": None if limit is None else limit / 1000.0,
            "sm_clock": q("nvmlDeviceGetClockInfo", h, self.const("NVML_CLOCK_SM", 1)),
            "mem_clock": q("nvmlDeviceGetClockInfo", h, self.const("NVML_CLOCK_MEM", 2)),
            "fan": _float(q("nvmlDeviceGetFanSpeed", h)),
            "throttle": throttle,
            "ecc_vol_corr": ecc[0],
            "ecc_vol_unc": ecc[1],
            "ecc_agg_corr": ecc[2],
            "ecc_agg_unc": ecc[3],
            "retired_pages": retired,
            "remap_pending": pending,
            "pcie_tx": _float(tx),
            "pcie_rx": _float(rx),
            "pcie_replay": q("nvmlDeviceGetPcieReplayCounter", h),
            "nvlink_err": self.cached(index, "nvlink", self.ttl, lambda: self._nvlink(h)),
            "procs": self._procs(h, known),
        }

    def _ecc(self, h: Any) -> Tuple[Optional[int], ...]:
        corr = self.const("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        unc = self.const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        vol = self.const("NVML_VOLATILE_ECC", 0)
        agg = self.const("NVML_AGGREGATE_ECC", 1)
        return tuple(self.query("nvmlDeviceGetTotalEccErrors", h, kind, counter)
                     for counter, kind in ((vol, corr), (vol, unc), (agg, corr), (agg, unc)))

    def _retired(self, h: Any) -> Tuple[Optional[int], Optional[bool]]:
        """Retired pages on older GPUs, remapped rows on Ampere and newer."""
        remap = self.query("nvmlDeviceGetRemappedRows", h)
        if remap is not None:
            corr, unc, pending, _failure = remap
            return int(corr) + int(unc), bool(pending)
        pages = [self.query("nvmlDeviceGetRetiredPages", h, cause) for cause in (
            self.const("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
            self.const("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))]
        if all(p is None for p in pages):
            return None, None
        pending = self.query("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return (sum(len(p) for p in pages if p is not None),
                None if pending is None else bool(pending))

    def _nvlink(self, h: Any) -> Optional[int]:
        """Sum of CRC / replay / recovery error counters over active links (None: no NVLink)."""
        counters = [self.const(name, code) for name, code in (
            ("NVML_NVLINK_ERROR_DL_REPLAY", 0), ("NVML_NVLINK_ERROR_DL_RECOVERY", 1),
            ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2), ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3))]
        total = None
        for link in range(self.const("NVML_NVLINK_MAX_LINKS", 18)):
            state = self.query("nvmlDeviceGetNvLinkState", h, link)
            if state is None:
                break
            if not state:
                continue
            for counter in counters:
                value = self.query("nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
                if value is not None:
                    total = (total or 0) + int(value)
        return total

    def _procs(self, h: Any, known: Dict[int, Optional[int]]) -> List[dict]:
        merged: Dict[int, Optional[int]] = {}
        for name in ("nvmlDeviceGetComputeRunningProcesses",
                     "nvmlDeviceGetGraphicsRunningProcesses"):
            for proc in self.query(name, h) or ():
                pid = getattr(proc, "pid", None)
                if pid is None:
                    continue
                mem = getattr(proc, "usedGpuMemory", None)
                if merged.get(pid) is None:
                    merged[pid] = mem
        return [{"pid": pid, "mem": mem, "rank": self._ranks(pid, known)}
                for pid, mem in sorted(merged.items())]


def _float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _say_on_stderr(msg: str, data: Mapping[str, Any]) -> None:
    try:
        sys.stderr.write("cockpit-agent: %s\n" % msg)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no stderr left to say it on


def xid_records(gpu: int, xid: int, uuid: Optional[str], ts: float) -> List[Tuple[str, dict]]:
    """The `event` and the resource `alert` journaled for one XID."""
    hint = XID_HINTS.get(xid, "look up XID %d in NVIDIA's XID catalogue; check dmesg" % xid)
    what = "GPU %d reported XID %d" % (gpu, xid)
    return [
        (EVENT, {"kind": XID, "job": None, "rank": None, "step": None, "msg": what,
                   "data": {"gpu": gpu, "xid": xid, "uuid": uuid}, "ts": ts}),
        (ALERT, {"kind": "resource", "severity": "critical", "code": "gpu_xid",
                   "where": {"gpu": gpu}, "what": what, "hint": hint, "ts": ts}),
    ]


class XidWatcher:
    """Waits on NVML's event API in a thread and calls `on_xid(gpu, xid, ts)`.

    A failure of one round (the wait, or `on_xid` on one event) never ends the thread:
    `on_error(message, data)` hears it (the daemon journals a `sampler_error`), and the
    thread goes on after a wait that grows while failures repeat (`XID_RETRY_MAX`)."""

    def __init__(self, nvml: Nvml, on_xid: Callable[[int, int, float], None],
                 timeout_ms: int = 500,
                 on_error: Optional[Callable[[str, Dict[str, Any]], None]] = None) -> None:
        self.nvml = nvml
        self.on_xid = on_xid
        self.on_error = on_error or _say_on_stderr
        self.timeout_ms = timeout_ms
        self.registered: List[int] = []  # the GPUs whose XIDs are seen
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._event_set: Any = None
        self._tried = False

    def register(self) -> bool:
        """Ask NVML for each GPU's XID events, without waiting for them yet: `registered`
        then names the GPUs whose XIDs will be seen (the hello says which, so that a
        GPU without an XID reads "none" only where one would have been seen). False when
        there is nothing to watch (no NVML, or no GPU takes XID events)."""
        if self._tried:
            return bool(self.registered)
        self._tried = True
        if not self.nvml.init():
            return False
        event_set = self.nvml.query("nvmlEventSetCreate")
        if event_set is None:
            return False
        kind = self.nvml.const("nvmlEventTypeXidCriticalError", _XID_EVENT)
        for index, handle in enumerate(self.nvml.handles):
            try:
                self.nvml.nvml.nvmlDeviceRegisterEvents(handle, kind, event_set)
                self.registered.append(index)
            except Exception:  # not supported on this GPU (e.g. some vGPUs)
                continue
        if not self.registered:
            self.nvml.query("nvmlEventSetFree", event_set)
            return False
        self._event_set = event_set  # events from here on wait in it for the thread
        return True

    def start(self) -> bool:
        """Watch the registered GPUs (`register` first if not done); False when there is
        nothing to watch."""
        if not self.register():
            return False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(self._event_set,),
                                            name="xid-watcher", daemon=True)
            self._thread.start()
        return True

    def _run(self, event_set: Any) -> None:
        failures = 0  # in a row
        try:
            while not self._stop.is_set():
                try:
                    failed = self._once(event_set)
                except Exception as exc:  # an event that cannot be read, or a bug
                    failed = True
                    self._report("XID watcher failed: %s: %s" % (type(exc).__name__, exc),
                                 {})
                if not failed:
                    failures = 0
                    continue
                failures += 1
                self._stop.wait(min(XID_RETRY_MAX, 2.0 ** (failures - 1)))
        finally:
            self.nvml.query("nvmlEventSetFree", event_set)

    def _once(self, event_set: Any) -> bool:
        """Wait for one event and hand it on; True when that failed (and was said)."""
        try:
            data = self.nvml.nvml.nvmlEventSetWait(event_set, self.timeout_ms)
        except Exception as exc:
            if getattr(exc, "value", None) == _TIMEOUT_CODE:
                return False  # no event within the timeout: the usual answer
            self._report("waiting for XID events failed: %s: %s" % (type(exc).__name__, exc),
                         {})
            return True
        gpu_index = self.nvml.query("nvmlDeviceGetIndex", data.device)
        gpu = -1 if gpu_index is None else int(gpu_index)
        xid = int(data.eventData)
        try:
            self.on_xid(gpu, xid, time.time())
        except Exception as exc:
            # The event is not handed on again (part of it may be journaled already);
            # the report names it, so it is not lost without a word.
            self._report("XID %d of GPU %d was not fully handled: %s: %s" % (
                xid, gpu, type(exc).__name__, exc), {"gpu": gpu, "xid": xid})
            return True
        return False

    def _report(self, msg: str, data: Dict[str, Any]) -> None:
        try:
            self.on_error(msg, dict(data, sampler="xid"))
        except Exception:
            _say_on_stderr(msg, data)  # the reporter failed too: the log still hears it

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.timeout_ms / 1000.0 + 1)
        elif self._event_set is not None:  # registered, never watched: its thread frees it
            self.nvml.query("nvmlEventSetFree", self._event_set)
        self._event_set = None
