"""A GPU's hardware faults survive a relaunch in the cockpit's view: a GPU that raised
an XID in the previous run of the job is flagged in the next (its XID shown, and an
alert naming it), even after another GPU's newer XID; one whose lifetime ECC counter
shows uncorrectable errors the volatile count no longer does is flagged too.

The recording: job j1 on node-a (2 GPUs) runs 100 one-second steps; GPU 0 raises XID 79
at its step 50. The operator launches j1 afresh 1000 s later (the store files the first
run as `j1 (earlier run 1)`); the new run trains 100 steps and GPU 1 raises XID 13 in
its last minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.gpu_history import run_began
from cockpit.read.report import render_report
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Snapshot
from cockpit.store import Store
from cockpit.store.queries import StoreReader
from tests.store.wire import TS0

RELAUNCH = TS0 + 1000.0


class _Wire:
    def __init__(self) -> None:
        self.seq = 0
        self.lines = b""

    def add(self, t: str, ts: float, **fields: object) -> None:
        self.seq += 1
        self.lines += encode(t, self.seq, fields, ts=ts)


def _gpu(w: _Wire, ts: float, gpu: int, ecc_agg_unc: int = 0) -> None:
    w.add("gpu", ts, gpu=gpu, uuid=f"GPU-{gpu}", sim=False, util=90.0, temp=60.0,
          mem_used=1 << 30, mem_total=80 << 30, throttle=0, ecc_vol_unc=0,
          ecc_agg_unc=ecc_agg_unc)


def _run(w: _Wire, start: float, steps: int) -> None:
    w.add("event", start, kind="job_started", job="j1", rank=None, step=None,
          msg="job j1 started", data={"reason": "launch", "attempt": 1})
    w.add("run", start + 1, job="j1", rank=0, total_steps=1000, world_size=1)
    for step in range(1, steps + 1):
        w.add("train", start + 1 + step, job="j1", rank=0, step=step, loss=1.0,
              step_time=1.0, samples=8)
        if step % 10 == 0:
            for gpu in (0, 1):
                _gpu(w, start + 1 + step, gpu, ecc_agg_unc=3 if gpu == 1 else 0)


def _xid(w: _Wire, ts: float, gpu: int, xid: int) -> None:
    w.add("event", ts, kind="xid", job=None, rank=None, step=None,
          msg=f"GPU {gpu} reported XID {xid}", data={"gpu": gpu, "xid": xid, "uuid": f"GPU-{gpu}"})


def _recording(path: Path) -> Path:
    w = _Wire()
    w.add("hello", TS0 - 1, agent_version="test", protocol=1, hostname="node-a",
          gpu_source="nvml", gpu_state="ok",
          gpus=[{"index": i, "uuid": f"GPU-{i}", "name": "H100", "mem_total": 80 << 30}
                for i in (0, 1)])
    _run(w, TS0, 100)
    _xid(w, TS0 + 51.5, 0, 79)
    _run(w, RELAUNCH, 100)
    _xid(w, RELAUNCH + 95.5, 1, 13)
    with Store(path) as store:
        store.ingest("node-a", w.lines)
    return path


def _snapshot(path: Path) -> Snapshot:
    with Store(path, read_only=True) as store:
        return build_snapshot(StoreReader(store), until_ts=None, label="REPLAY", job="j1")


@pytest.mark.slow
def test_a_gpu_that_failed_the_previous_run_is_flagged_in_the_next(tmp_path: Path) -> None:
    path = _recording(tmp_path / "r.duckdb")
    snap = _snapshot(path)
    assert snap.job == "j1" and "j1 (earlier run 1)" in snap.jobs
    cells = {c.index: c for c in snap.health.hosts[0].gpus}
    assert (cells[0].xid, cells[0].xid_count, cells[0].xid_earlier, cells[0].xid_codes) == (
        79, 1, 1, (79,))
    assert (cells[1].xid, cells[1].xid_count, cells[1].xid_earlier) == (13, 1, 0)
    history = [a for a in snap.alerts if a.code == "gpu_fault_history"]
    assert [a.where for a in history] == ["host node-a / gpu 0"]
    assert "1 XID before this run began (codes 79)" in history[0].what
    assert "--exclude node-a" in history[0].hint
    ecc = [a for a in snap.alerts if a.code == "gpu_ecc_history"]
    assert [a.where for a in ecc] == ["host node-a / gpu 1"]
    assert "3 uncorrectable ECC errors in its lifetime" in ecc[0].what
    report = render_report(path)
    assert "gpu_fault_history" in report and "GPU 0 raised 1 XID" in report
    assert "79 (1 before this run)" in report


def test_within_the_first_run_nothing_is_an_earlier_runs(tmp_path: Path) -> None:
    path = _recording(tmp_path / "r.duckdb")
    with Store(path, read_only=True) as store:
        snap = build_snapshot(StoreReader(store), until_ts=TS0 + 90, label="REPLAY",
                              job="j1")
    cells = {c.index: c for c in snap.health.hosts[0].gpus}
    assert (cells[0].xid, cells[0].xid_earlier) == (79, 0)
    assert not [a for a in snap.alerts if a.code == "gpu_fault_history"]


def test_the_run_begins_at_the_newest_launch_not_a_restart() -> None:
    def started(ts: float, reason: str) -> dict[str, object]:
        return {"kind": "job_started", "ts": ts, "data": {"reason": reason}}
    lifecycle = [started(10.0, "launch"), started(500.0, "recovery"),
                 started(900.0, "relaunch"), started(930.0, "relaunch"),
                 started(2000.0, "resume")]
    # Two hosts' starts of one relaunch (30 s apart): the run began at the first.
    assert run_began(lifecycle, 1.0) == 900.0
    assert run_began([started(5.0, "recovery")], 1.0) == 1.0
