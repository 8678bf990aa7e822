"""A realistic recording written through the real wire encoding and `Store.ingest`.

Two hosts with two GPUs each run four ranks of one job for `STEPS` one-second steps.
The script plants one of everything the read path must find: a loss spike, a NaN step,
val loss turning up while train loss keeps falling, an interruption and its recovery,
a thermal-throttling GPU, an XID, a nearly full disk, a malformed spool line, a
straggler rank, checkpoints, job output and an agent alert.
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.wire.protocol import encode
from cockpit.store.database import Store

T0 = 1_700_000_000.0
STEPS = 600
FIRST_STEP_TS = T0 + 10.0
HOSTS = ("node-a", "node-b")
RANKS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
SAMPLES_PER_RANK = 32
TOKENS_PER_SAMPLE = 128
SPIKE_STEP = 300
NAN_STEP = 450
INTERRUPT_AFTER_STEP = 250
OUTAGE_S = 40.0
STRAGGLER_FROM = 500
STRAGGLER_RANK = 3
EVAL_EVERY = 50
BEST_VAL_STEP = 300
THROTTLE_FROM_TS = T0 + 500.0
TOTAL_STEPS = 1000
FLOPS_PER_STEP = 4e12
PEAK_FLOPS = 1e14
CHECKPOINT_EVERY = 200
CHECKPOINT_SECONDS = 30.0


def step_ts(step: int) -> float:
    return FIRST_STEP_TS + step + (OUTAGE_S if step > INTERRUPT_AFTER_STEP else 0.0)


def train_loss(step: int) -> float:
    base = 2.0 * math.exp(-step / 200.0) + 0.5 + 0.01 * math.sin(step * 1.3)
    return base * 3.0 if step == SPIKE_STEP else base


def val_loss(step: int) -> float:
    return 0.9 + 0.0005 * abs(step - BEST_VAL_STEP) + (0.0 if step <= BEST_VAL_STEP else 0.05)


@dataclass
class Recording:
    lines: dict[str, list[tuple[float, str, dict[str, Any]]]] = field(
        default_factory=lambda: {h: [] for h in HOSTS}
    )

    def add(self, host: str, ts: float, t: str, **fields: Any) -> None:
        self.lines[host].append((ts, t, fields))

    def wire(self, host: str) -> Iterator[bytes]:
        """The host's records in time order, seq-numbered from 1 like a journal."""
        ordered = sorted(self.lines[host], key=lambda item: item[0])
        yield encode("stream", 0, {"protocol": 1, "agent_version": "test",
                                   "journal_id": f"j-{host}", "from": 0, "first": 1,
                                   "head": len(ordered)}, ts=T0)
        for seq, (ts, t, fields) in enumerate(ordered, 1):
            yield encode(t, seq, fields, ts=ts)


def build_recording(*, steps: int = STEPS) -> Recording:
    rec = Recording()
    for host in HOSTS:
        rec.add(host, T0, "hello", agent_version="test", protocol=1, hostname=host,
                boot_id="boot-1", pid=100, python="3.12.1", platform="Linux", cpu_count=16,
                mem_total=64 << 30, gpu_source="nvml", gpu_state="ok", driver="550.54",
                gpus=[{"index": i, "uuid": f"GPU-{host}-{i}", "name": "H100",
                       "mem_total": 80 << 30, "simulated": False} for i in range(2)],
                env={"python": "3.12.1", "torch": "2.13.0", "cuda": "12.4"}, psutil=True)
    rec.add("node-a", T0 + 1, "run", job="job-1", rank=0, total_steps=TOTAL_STEPS,
            total_epochs=None, total_samples=None, total_tokens=None, stages=["pretrain"],
            config={"lr": 3e-4, "batch": 128}, seed=7, data_version="v3",
            git_commit="abc123", flops_per_step=FLOPS_PER_STEP, peak_flops=PEAK_FLOPS,
            world_size=4, tags=["synthetic"])
    rec.add("node-a", T0 + 5, "event", kind="job_started", job="job-1", rank=None, step=None,
            msg="job started", data={})
    last_ts = step_ts(steps - 1)
    for step in range(steps):
        ts = step_ts(step)
        for rank, host in RANKS.items():
            slow = step >= STRAGGLER_FROM
            compute = 0.9 if slow and rank == STRAGGLER_RANK else 0.7 if not slow else 0.5
            comm = 0.2 if not slow else (0.0 if rank == STRAGGLER_RANK else 0.4)
            nan = step == NAN_STEP and rank == 0
            rec.add(host, ts + 0.001 * rank, "train", job="job-1", rank=rank, step=step,
                    epoch=step / 300.0, stage="pretrain",
                    loss=None if nan else train_loss(step) + 0.001 * rank,
                    nonfinite="nan" if nan else None, lr=3e-4, samples=SAMPLES_PER_RANK,
                    tokens=SAMPLES_PER_RANK * TOKENS_PER_SAMPLE, step_time=1.0, data_time=0.1,
                    compute_time=compute, comm_time=comm, ckpt_time=None,
                    loss_scale=65536.0, grad_norm=1.0, extra={})
        if step and step % EVAL_EVERY == 0:
            rec.add("node-a", ts + 0.5, "eval", job="job-1", rank=0, step=step,
                    loss=val_loss(step), metrics={"acc": 0.5 + step / 2000})
        if step and step % CHECKPOINT_EVERY == 0:
            rec.add("node-a", ts + 0.6, "event", kind="checkpoint_saved", job="job-1", rank=0,
                    step=step, msg=f"checkpoint at step {step} saved",
                    data={"path": f"/ckpt/{step}.pt", "seconds": CHECKPOINT_SECONDS,
                          "bytes": 1 << 30})
        if step % 50 == 0:
            rec.add("node-a", ts + 0.7, "log", job="job-1", rank=0, stream="stdout",
                    line=f"step {step} loss {train_loss(step):.4f}")
    cut = step_ts(INTERRUPT_AFTER_STEP)
    rec.add("node-b", cut + 5, "event", kind="interruption", job="job-1", rank=2,
            step=INTERRUPT_AFTER_STEP, msg="rank 2 exited",
            data={"cause": "rank 2 killed (SIGKILL)", "evidence": "exit code -9",
                  "detected_at": cut + 5, "detection_latency": 1.5})
    rec.add("node-b", cut + OUTAGE_S, "event", kind="recovery", job="job-1", rank=None,
            step=INTERRUPT_AFTER_STEP, msg="job recovered",
            data={"cause": "rank 2 killed (SIGKILL)", "recovery_seconds": OUTAGE_S - 5,
                  "steps_lost": 10, "restart_count": 1, "checkpoint": "/ckpt/200.pt"})
    rec.add("node-b", T0 + 400, "event", kind="xid", job=None, rank=None, step=None,
            msg="XID 13 on GPU 1", data={"gpu": 1, "xid": 13})
    rec.add("node-a", T0 + 120, "event", kind="spool_error", job="job-1", rank=1, step=None,
            msg="malformed spool line", data={"file": "spool/job-1/rank-1.ndjson",
                                              "line": 17, "error": "not JSON"})
    rec.add("node-b", THROTTLE_FROM_TS + 1, "alert", kind="resource", severity="warning",
            code="thermal_throttle", where={"gpu": 1}, what="GPU 1 throttling (agent)",
            hint="check cooling")
    t = T0
    while t <= last_ts + 1:
        for host in HOSTS:
            for gpu in range(2):
                hot = host == "node-b" and gpu == 1 and t >= THROTTLE_FROM_TS
                rec.add(host, t, "gpu", gpu=gpu, uuid=f"GPU-{host}-{gpu}", sim=False,
                        util=92.0 - 10 * gpu, mem_util=40.0, mem_used=60 << 30,
                        mem_total=80 << 30, temp=91.0 if hot else 70.0, power=600.0,
                        power_limit=700.0, sm_clock=1800, mem_clock=2600, fan=None,
                        throttle=0x40 if hot else 0, ecc_vol_corr=0, ecc_vol_unc=0,
                        ecc_agg_corr=0, ecc_agg_unc=0, retired_pages=0, remap_pending=False,
                        pcie_tx=1e5, pcie_rx=1e5, pcie_replay=0, nvlink_err=0,
                        procs=[{"pid": 1000 + gpu, "mem": 50 << 30, "rank": gpu
                                + (0 if host == "node-a" else 2)}])
            rec.add(host, t + 0.5, "host", cpu=35.0, load1=4.0, load5=4.0, load15=4.0,
                    mem_used=20 << 30, mem_total=64 << 30, swap_used=0, swap_total=0,
                    disk_path="/data", disk_used=(95 if host == "node-a" else 40) << 30,
                    disk_total=100 << 30, disk_read=1e6, disk_write=1e6, net_rx=1e8, net_tx=1e8,
                    procs=[{"pid": 1000 + i, "rank": i + (0 if host == "node-a" else 2),
                            "cpu": 100.0, "rss": 4 << 30, "state": "R", "fds": 50}
                           for i in range(2)])
        t += 2.0
    return rec


# Ingested once per process and length, then copied: dozens of tests start from this
# recording, and ingesting it is most of what they would otherwise spend.
_INGESTED: dict[int, Path] = {}


def write_recording(path: Path, *, steps: int = STEPS) -> Path:
    """The synthetic recording in a real store at `path`, ingested through the real wire
    encoding and `Store.ingest` (once per process; then a copy of that store file)."""
    ingested = _INGESTED.get(steps)
    if ingested is None or not ingested.exists():
        folder = Path(tempfile.mkdtemp(prefix="synthetic-recording-"))
        atexit.register(shutil.rmtree, folder, True)
        ingested = _INGESTED[steps] = _ingest(folder / f"steps-{steps}.duckdb", steps)
    shutil.copyfile(ingested, path)
    return path


def _ingest(path: Path, steps: int) -> Path:
    rec = build_recording(steps=steps)
    with Store(path) as store:
        for host in HOSTS:
            lines = list(rec.wire(host))
            for i in range(0, len(lines), 5000):
                result = store.ingest(host, b"".join(lines[i:i + 5000]))
                if result.malformed:
                    raise ValueError(f"synthetic recording has malformed lines: {result}")
    return path


ADJUST_STEP = 540  # the operator halved the LR here (the trainer's acknowledgement)
RESUME_STEP = 500  # and the job later restarted from this step's checkpoint


def intervention_lines() -> list[bytes]:
    """Two wire events of node-a after the last step: an applied LR change, then a
    restart from a checkpoint (what the loss chart marks)."""
    last = step_ts(STEPS - 1)
    return [
        encode("event", 10**6, {"kind": "control_ack", "job": "job-1", "rank": 0,
                                "step": ADJUST_STEP, "msg": "applied lr_scale=0.5",
                                "data": {"op": "adjust", "ok": True,
                                         "knobs": {"lr_scale": 0.5}}}, ts=last - 50),
        encode("event", 10**6 + 1, {"kind": "resumed", "job": "job-1", "rank": 0,
                                    "step": RESUME_STEP,
                                    "msg": f"resumed from ckpt-{RESUME_STEP:08d}.pt",
                                    "data": {}}, ts=last + 5),
    ]
