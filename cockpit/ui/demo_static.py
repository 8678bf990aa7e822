"""A fixed, plausible job for demos and screenshots: `python -m cockpit.ui.demo_static`.

Everything is computed from closed-form curves (no randomness, no clock), so two runs
draw the same screen. The GPUs are labelled simulated, as the data is made up.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.wire import states
from agent.wire.throttle import SW_THERMAL
from cockpit.analysis import timeline
from cockpit.analysis.efficiency import with_gauge_levels
from cockpit.analysis.markers import ADJUST, RESTART
from cockpit.analysis.timeline import THROTTLE_FAULT, UNREACHABLE_FAULT, XID_FAULT
from cockpit.read.seams import SNAPSHOT_BUCKETS
from cockpit.sessions.static_source import StaticSource
from cockpit.snapshot import (
    Alert,
    Effect,
    Efficiency,
    EventRow,
    GpuCell,
    Health,
    HostHealth,
    Interruption,
    LrChange,
    Marker,
    Progress,
    RankProgress,
    RankTime,
    Series,
    Snapshot,
    StageSpan,
)
from cockpit.transport import states as link

if TYPE_CHECKING:
    from textual.pilot import Pilot

T0 = 1_700_000_000.0
STEPS = 12_000
TOTAL = 50_000
BUCKETS = SNAPSHOT_BUCKETS  # as a recording's snapshot has them
HOSTS = ("gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-d")


def _series(values: Sequence[float | None], xs: list[float]) -> Series:
    return Series(x=tuple(xs), last=tuple(values), lo=tuple(values), hi=tuple(values))


def _effect() -> Effect:
    xs = [STEPS * (i + 1) / BUCKETS for i in range(BUCKETS)]
    raw = [2.0 + 8.0 * math.exp(-x / 2500) + 0.15 * math.sin(i * 1.7) for i, x in enumerate(xs)]
    raw[70] = raw[70] * 1.6  # a spike
    ema = [2.0 + 8.0 * math.exp(-x / 2500) for x in xs]
    val_x = xs[9::10]
    val = [2.1 + 8.0 * math.exp(-x / 2500) + max(0.0, (x - 9000) / 20000) for x in val_x]
    best = min(range(len(val)), key=val.__getitem__)
    # Warm-up then cosine decay; the operator halved it at ADJUST_STEP.
    lr = [_lr(x) for x in xs]
    return Effect(
        train_loss=_series(raw, xs), train_loss_ema=_series(ema, xs),
        val_loss=_series(val, val_x),
        loss_scale=_series([65536.0] * BUCKETS, xs), lr=_series(lr, xs),
        last_loss=raw[-1], last_val_loss=val[-1], best_val_step=int(val_x[best]),
        best_val_loss=val[best], divergence_step=int(val_x[best]),
        spike_steps=(int(xs[70]),), nonfinite_steps=(), last_loss_scale=65536.0,
        markers=(Marker(RESUMED_STEP, RESTART, f"resumed from step {RESUMED_STEP}"),
                 Marker(ADJUST_STEP, ADJUST, "lr_scale=0.5")), last_lr=lr[-1],
        lr_scale="0.5", lr_changes=(LrChange(ADJUST_STEP, "lr_scale=0.5", _lr(ADJUST_STEP),
                                             _lr(ADJUST_STEP + 1)),),
        faults=FAULTS,
    )


ADJUST_STEP = 8_000
# The node failure: gpu-node-b lost at LOST_STEP, the job back from the checkpoint at
# RESUMED_STEP; later a GPU throttled for heat and one that fell off the bus.
LOST_STEP = 5_600
RESUMED_STEP = LOST_STEP - 180
THROTTLE_STEP = STEPS - 700
XID_STEP = STEPS - 140
FAULTS = (
    Marker(LOST_STEP, UNREACHABLE_FAULT, "gpu-node-b: host unreachable", host="gpu-node-b"),
    Marker(THROTTLE_STEP, THROTTLE_FAULT, "gpu-node-c: gpu 5 throttled: thermal (SW)",
           host="gpu-node-c"),
    Marker(XID_STEP, XID_FAULT, "gpu-node-b: XID 79 gpu 3", host="gpu-node-b"),
)


def _lr(step: float) -> float:
    peak = 3e-4 * min(1.0, step / 1000)
    scale = 0.5 if step > ADJUST_STEP else 1.0
    return scale * peak * 0.5 * (1 + math.cos(math.pi * min(step, TOTAL) / TOTAL))


def _gpu(host_i: int, gpu: int) -> GpuCell:
    problem_xid = host_i == 1 and gpu == 3
    throttled = host_i == 2 and gpu == 5
    return GpuCell(
        index=gpu, online=not (host_i == 3 and gpu == 7), simulated=True,
        util=90.0 - 3 * gpu, temp=88.0 if throttled else 60.0 + gpu, power=300.0 + 5 * gpu,
        power_limit=400.0, mem_used=60 * 2**30, mem_total=80 * 2**30, ecc_unc=0,
        xid=79 if problem_xid else None, throttle=SW_THERMAL if throttled else 0, name="SIM-H100",
        xid_watched=True,  # the simulated GPUs report XIDs (one has had one): "none" is known
    )


def _health() -> Health:
    hosts = tuple(
        HostHealth(host=name, state=link.STALE if i == 3 else link.STREAMING,
                   gpu_state=states.GPU_SIMULATED,
                   gpus=tuple(_gpu(i, g) for g in range(8)), cpu=35.0 + i, mem_used=200 * 2**30,
                   mem_total=512 * 2**30, disk_used=(400 + 100 * i) * 2**30,
                   disk_total=2048 * 2**30, net_rx=1.2e9, net_tx=0.9e9, last_seen=T0 - i)
        for i, name in enumerate(HOSTS)
    )
    interruptions = (Interruption(cause="node failure (gpu-node-b unreachable)",
                                  detected_at=T0 - 5400, recovered_in=95.0, steps_lost=180,
                                  restart_count=1, evidence="heartbeat lost"),)
    return Health(hosts=hosts, interruptions=interruptions, simulated=True)


def _throughput(step: float) -> float:
    """Samples/s by step: a ripple, nothing while the job restarted, slower while a GPU
    was throttled."""
    if LOST_STEP - 100 < step <= LOST_STEP + 100:
        return 0.0
    slow = 0.8 if THROTTLE_STEP <= step < XID_STEP else 1.0
    return slow * (800 + 30 * math.sin(step / 700))


def _efficiency() -> Efficiency:
    xs = [float(i) for i in range(BUCKETS)]
    steps = [STEPS * (i + 1) / BUCKETS for i in range(BUCKETS)]
    tput = [_throughput(x) for x in steps]
    busy = [85 + 8 * math.sin(i / 11) for i in range(BUCKETS)]
    return with_gauge_levels(Efficiency(
        gpu_busy=86.5, samples_per_s=812.0, tokens_per_s=1.66e6, data_wait_pct=7.5,
        comm_pct=18.0, mfu=0.41, step_time_median=0.84, step_time_spread=0.23,
        slowest_ranks=_rank_times()[:3], ranks=_rank_times(), rank_count=len(HOSTS) * 8,
        throughput_history=_series(tput, steps), gpu_busy_history=_series(busy, xs),
    ))


def _rank_times() -> tuple[RankTime, ...]:
    """Eight ranks a host, slowest first: rank 13 (gpu-node-b) waits on its data loader,
    rank 21 and rank 2 are a little slow, the rest even."""
    own = {r: 0.80 + 0.004 * (r % 5) for r in range(len(HOSTS) * 8)}
    own.update({13: 1.03, 21: 0.97, 2: 0.88})
    data = {13: 0.21, 21: 0.09}
    fastest = min(own.values())
    return tuple(RankTime(r, HOSTS[r // 8], t, wall_time=t + 0.06, data_share=data.get(r, 0.05),
                          comm_share=0.06 / (t + 0.06), behind=t / fastest - 1)
                 for r, t in sorted(own.items(), key=lambda kv: (-kv[1], kv[0])))


def _ranks() -> tuple[RankProgress, ...]:
    """Eight ranks a host; rank 13 (on gpu-node-b) a few steps behind the rest."""
    lag = {13: 3, 21: 1}
    return tuple(RankProgress(r, HOSTS[r // 8], STEPS - lag.get(r, 0),
                              1 / (0.84 + (0.19 if r == 13 else 0.13 if r == 21 else 0.0)),
                              lag.get(r, 0))
                 for r in range(8 * len(HOSTS)))


def _stages() -> tuple[StageSpan, ...]:
    """Start-up, then training with an evaluation and a checkpoint every 1,000 steps
    (at 1.19 steps/s), and the restart after the node failure."""
    rate = 1.19
    start = T0 - STEPS / rate - 600
    spans = [StageSpan(start, start + 600, timeline.START_UP_STAGE)]
    at = start + 600
    for k in range(1, STEPS // 1000 + 1):
        end = at + 1000 / rate
        if k == LOST_STEP // 1000 + 1:
            lost = at + (LOST_STEP % 1000) / rate
            spans += [StageSpan(at, lost, timeline.TRAIN_STAGE),
                      StageSpan(lost, lost + 95, timeline.RESTARTING_STAGE)]
            at = lost + 95
            end = at + (1000 - LOST_STEP % 1000 + 180) / rate
        spans += [StageSpan(at, end, timeline.TRAIN_STAGE),
                  StageSpan(end, end + 60, timeline.EVAL_STAGE),
                  StageSpan(end + 60, end + 90, timeline.CHECKPOINT_STAGE)]
        at = end + 90
    spans.append(StageSpan(at, T0, timeline.TRAIN_STAGE))
    return tuple(spans)


def demo_snapshot(*, stalled: bool = False, label: str = "DEMO") -> Snapshot:
    progress = Progress(
        stage="pretrain", epoch=1.42, step=STEPS, total_steps=TOTAL, samples=STEPS * 512,
        tokens=STEPS * 512 * 2048, percent=100 * STEPS / TOTAL, eta_seconds=38_000 / 1.19,
        eta_low=38_000 / 1.31, eta_high=38_000 / 1.05, steps_per_second=1.19,
        since_last_step=42.0 if stalled else 0.8, stalled=stalled,
        stall_cause="data starved" if stalled else None,
        stall_detail="data wait 92% on all ranks" if stalled else None,
        state=states.STALLED if stalled else states.RUNNING, ranks=_ranks(), stages=_stages(),
    )
    alerts = (
        Alert(T0 - 120, "resource", "critical", "gpu-xid", "host gpu-node-b / gpu 3 / rank 11",
              "XID 79: GPU has fallen off the bus", "drain gpu-node-b and relaunch without it"),
        Alert(T0 - 300, "parameter", "warning", "val-divergence", f"step {int(STEPS * 0.8)}",
              "validation loss stopped improving while train loss keeps falling",
              "evaluate the best checkpoint; consider more regularisation or lower LR"),
        Alert(T0 - 600, "resource", "warning", "thermal-throttle", "host gpu-node-c / gpu 5",
              "GPU 5 is thermally throttled at 88°C", "check cooling / fan on gpu-node-c"),
    )
    events = tuple(EventRow(T0 - 60 * k, HOSTS[k % 4], kind, msg, STEPS - 100 * k)
                   for k, (kind, msg) in enumerate([
                       ("checkpoint", "checkpoint saved (step 11900)"),
                       ("eval", "validation finished"),
                       ("recovery", "job recovered after node failure"),
                       ("start", "job started")]))
    return Snapshot(ts=T0, source_label=label, job="demo-7b", progress=progress,
                    effect=_effect(), efficiency=_efficiency(), health=_health(),
                    alerts=alerts, events=events, controllable=False)


def demo_details() -> dict[str, object]:
    xs = [float(i) for i in range(BUCKETS)]

    def host(host: str = HOSTS[0]) -> dict[str, object]:
        return {
            "host": host,
            "gpu_util": _series([80 + 10 * math.sin(i / 7) for i in range(BUCKETS)], xs),
            "gpu_temp": _series([65 + 5 * math.sin(i / 13) for i in range(BUCKETS)], xs),
            "processes": [{"pid": 4100 + r, "rank": r, "cmd": "python train.py",
                           "gpu": r, "mem": f"{58 + r} GiB"} for r in range(8)],
        }

    return {
        "host": host,
        "run": {"job": "demo-7b", "seed": 1234, "data_version": "corpus-v3",
                "git_commit": "0123abc", "tags": ["demo", "7b"],
                "config": {"model": {"layers": 32, "hidden": 4096}, "lr": 3e-4,
                           "batch_size": 512},
                "env": {"python": "3.11.7", "torch": "2.x", "nccl": "2.x"}},
        "log": [f"[rank {r % 8}] step {STEPS - 50 + r} loss {2.3 + r / 100:.3f}"
                for r in range(50)] + ["[rank 3] WARNING: dataloader worker slow"],
        "events": list(demo_snapshot().events),
    }


def demo_source(*, stalled: bool = False) -> StaticSource:
    return StaticSource(demo_snapshot(stalled=stalled), demo_details())


def main(argv: list[str] | None = None) -> int:
    from cockpit.ui.app_factory import make_app
    from cockpit.ui.keymap import KeymapError
    from cockpit.ui.themes import ThemeError

    parser = argparse.ArgumentParser(prog="python -m cockpit.ui.demo_static",
                                     description="Show the cockpit on fixed demo data.")
    parser.add_argument("--theme", default="dark")
    parser.add_argument("--keymap", default=None)
    parser.add_argument("--stalled", action="store_true")
    parser.add_argument("--screenshot", metavar="SVG", default=None,
                        help="render headless at --size, save an SVG screenshot and exit")
    parser.add_argument("--size", default="160x48", help="terminal size for --screenshot")
    args = parser.parse_args(argv)
    try:
        app = make_app(demo_source(stalled=args.stalled), theme=args.theme,
                       keymap_path=args.keymap)
    except (ThemeError, KeymapError) as exc:
        print(f"cockpit: {exc}", file=sys.stderr)
        return 2
    if args.screenshot is None:
        app.run()
        return 0
    width, _, height = args.size.partition("x")

    async def shoot(pilot: Pilot) -> None:
        for _ in range(3):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        path = Path(args.screenshot)
        pilot.app.save_screenshot(path.name, path=str(path.parent or "."))
        pilot.app.exit()

    app.run(headless=True, size=(int(width), int(height)), auto_pilot=shoot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
