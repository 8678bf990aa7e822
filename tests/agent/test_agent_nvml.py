"""The NVML wrapper against an injected fake `pynvml` (no GPU on CI machines)."""

from __future__ import annotations

import queue
import threading
import time
import types
from pathlib import Path

import pytest

from agent.samplers.nvml import (
    STATE_NO_DRIVER,
    STATE_NO_PYNVML,
    Nvml,
    XidWatcher,
    xid_records,
)


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, TIMEOUT, LIB_NOT_FOUND = 3, 10, 12


class FakeNvml:
    """Just enough of pynvml's surface, with one GPU that lacks several features."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_NVLINK_MAX_LINKS = 4
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: int = 2, unsupported: tuple[str, ...] = ()) -> None:
        self.gpus = gpus
        self.unsupported = set(unsupported)
        self.calls: dict[str, int] = {}
        self.events: queue.Queue = queue.Queue()
        self.registered: list[int] = []
        self.init_error: int | None = None

    def _call(self, name: str, handle: int | None = None) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported or (handle == 1 and f"{name}@1" in self.unsupported):
            raise NVMLError(NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake-{h}"

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int):
        self._call("util", h)
        return types.SimpleNamespace(gpu=97, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h: int):
        return types.SimpleNamespace(used=60 << 30, total=80 << 30, free=20 << 30)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 71

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 612_345  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        self._call("fan", h)
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
        return 0x20

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return 0x4

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        self._call("ecc", h)
        return 10 * counter + kind

    def nvmlDeviceGetRemappedRows(self, h: int):
        self._call("remap", h)
        return (2, 1, 1, 0)

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int):
        return [0x1000, 0x2000]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return 0

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        return 1234 + counter

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return 5

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._call("nvlink", h)
        return 1 if link < 2 else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        return 1

    def nvmlDeviceGetComputeRunningProcesses(self, h: int):
        return [types.SimpleNamespace(pid=1000 + h, usedGpuMemory=30 << 30),
                types.SimpleNamespace(pid=4242, usedGpuMemory=None)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int):
        self._call("graphics", h)
        return [types.SimpleNamespace(pid=1000 + h, usedGpuMemory=1)]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, event_set: str) -> None:
        self._call("register", h)
        self.registered.append(h)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int):
        try:
            return self.events.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            raise NVMLError(TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: str) -> None:
        self._call("nvmlEventSetFree")


def test_full_record_from_nvml_with_ranks_mapped() -> None:
    nvml = Nvml(FakeNvml(gpus=2))
    assert nvml.init() and nvml.state == "ok" and nvml.driver == "550.54.15"
    inventory = nvml.inventory()
    assert inventory[1] == {"index": 1, "uuid": "GPU-fake-1", "name": "NVIDIA H100 80GB HBM3",
                            "mem_total": 80 << 30, "simulated": False}
    records = nvml.sample({1000: 0, 1001: 1})
    first = records[0]
    assert first["gpu"] == 0 and first["sim"] is False
    assert (first["util"], first["mem_util"], first["temp"]) == (97.0, 41.0, 71.0)
    assert first["power"] == pytest.approx(612.345) and first["power_limit"] == 700.0
    assert (first["sm_clock"], first["mem_clock"], first["fan"]) == (1980, 2619, 40.0)
    assert first["throttle"] == 0x20  # clocks-event reasons preferred over the old name
    assert [first[k] for k in ("ecc_vol_corr", "ecc_vol_unc", "ecc_agg_corr", "ecc_agg_unc")
            ] == [0, 1, 10, 11]
    assert (first["retired_pages"], first["remap_pending"]) == (3, True)  # remapped rows
    assert (first["pcie_tx"], first["pcie_rx"], first["pcie_replay"]) == (1234.0, 1235.0, 5)
    assert first["nvlink_err"] == 8  # 2 active links x 4 counters
    procs = {p["pid"]: p for p in first["procs"]}
    assert procs[1000] == {"pid": 1000, "mem": 30 << 30, "rank": 0}  # compute wins
    assert records[1]["procs"][0]["rank"] == 1


def test_unsupported_fields_are_none_not_errors() -> None:
    fake = FakeNvml(gpus=2, unsupported=(
        "fan@1", "util@1", "ecc@1", "remap@1", "nvlink@1", "graphics@1",
        "nvmlDeviceGetCurrentClocksEventReasons@1"))
    second = Nvml(fake).sample()[1]
    assert second["fan"] is None and second["util"] is None and second["mem_util"] is None
    assert second["ecc_vol_unc"] is None and second["ecc_agg_corr"] is None
    assert second["nvlink_err"] is None
    assert second["throttle"] == 0x4  # fell back on the pre-12.x function name
    assert (second["retired_pages"], second["remap_pending"]) == (4, False)  # retired pages
    assert {p["pid"] for p in second["procs"]} == {1001, 4242}


def test_slow_fields_are_cached_for_ttl() -> None:
    fake = FakeNvml(gpus=1)
    now = [100.0]
    nvml = Nvml(fake, ttl=10.0, clock=lambda: now[0])
    for _ in range(5):
        nvml.sample()
        now[0] += 1.0
    assert fake.calls["ecc"] == 4 and fake.calls["remap"] == 1  # one read of each
    assert fake.calls["util"] == 5  # fast fields every sample
    now[0] += 10.0
    nvml.sample()
    assert fake.calls["ecc"] == 8 and fake.calls["remap"] == 2


def test_no_driver_is_one_explicit_state() -> None:
    fake = FakeNvml()
    fake.init_error = LIB_NOT_FOUND
    nvml = Nvml(fake)
    assert nvml.init() is False
    assert nvml.state == STATE_NO_DRIVER
    assert nvml.sample() == [] and nvml.inventory() == []


def test_pynvml_missing_is_one_explicit_state() -> None:
    nvml = Nvml(load=lambda: None)
    assert nvml.init() is False and nvml.state == STATE_NO_PYNVML and nvml.sample() == []


def test_this_machine_without_a_gpu_reports_no_driver() -> None:
    pytest.importorskip("pynvml")
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    nvml = Nvml()
    assert nvml.init() is False and nvml.state == STATE_NO_DRIVER
    assert nvml.sample() == []


def test_xid_events_become_event_and_alert() -> None:
    fake = FakeNvml(gpus=2)
    fake.unsupported.add("register@1")
    nvml = Nvml(fake)
    seen: list[tuple[int, int]] = []
    got = threading.Event()

    def on_xid(gpu: int, xid: int, ts: float) -> None:
        seen.append((gpu, xid))
        got.set()

    watcher = XidWatcher(nvml, on_xid, timeout_ms=20)
    assert watcher.start()
    assert watcher.registered == [0]  # the GPU that refuses events is skipped
    fake.events.put(types.SimpleNamespace(device=0, eventType=0x8, eventData=79))
    assert got.wait(10)
    watcher.stop()
    assert seen == [(0, 79)]
    assert fake.calls["nvmlEventSetFree"] == 1
    event, alert = xid_records(0, 79, "GPU-fake-0", 123.0)
    assert event == ("event", {"kind": "xid", "job": None, "rank": None, "step": None,
                               "msg": "GPU 0 reported XID 79",
                               "data": {"gpu": 0, "xid": 79, "uuid": "GPU-fake-0"},
                               "ts": 123.0})
    assert alert[0] == "alert" and alert[1]["kind"] == "resource"
    assert alert[1]["code"] == "gpu_xid" and alert[1]["where"] == {"gpu": 0}
    assert "fallen off the bus" in alert[1]["hint"]


def test_xid_watcher_without_nvml_does_not_start() -> None:
    fake = FakeNvml()
    fake.init_error = LIB_NOT_FOUND
    assert XidWatcher(Nvml(fake), lambda *a: None).start() is False


def test_a_registered_watcher_never_started_frees_its_event_set() -> None:
    fake = FakeNvml(gpus=2)
    watcher = XidWatcher(Nvml(fake), lambda *a: None)
    assert watcher.register() and watcher.register()  # asked once, answered again
    assert watcher.registered == [0, 1] and fake.calls["register"] == 2  # once per GPU
    watcher.stop()
    assert fake.calls["nvmlEventSetFree"] == 1


@pytest.mark.parametrize("simulated", [False, True])
def test_the_hello_says_whose_xids_are_seen(tmp_path: Path, simulated: bool) -> None:
    """A GPU that refuses NVML's XID events is listed so in the hello, so that the
    cockpit shows its XIDs as unknown rather than as none; a simulated GPU's come
    through `sim_xid`."""
    from agent.daemon import Daemon, DaemonConfig
    from agent.journal.journal import JournalReader
    from agent.samplers.sim import SimGpus

    fake = FakeNvml(gpus=2)
    fake.unsupported.add("register@1")
    gpus = SimGpus(2) if simulated else Nvml(fake)
    daemon = Daemon(DaemonConfig(tmp_path / "state"), gpus=gpus, log=lambda msg: None)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        hello = None
        while hello is None and time.monotonic() < deadline:
            hello = next((r for r in JournalReader(tmp_path / "state").records()
                          if r["t"] == "hello"), None)
            time.sleep(0.02)
        assert hello is not None
        assert [g["xid_events"] for g in hello["gpus"]] == (
            [True, True] if simulated else [True, False])
        if not simulated:
            assert daemon.xid is not None and daemon.xid.registered == [0]
    finally:
        daemon.stop()
        runner.join(30)
