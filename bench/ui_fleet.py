"""Main-screen refresh at fleet scale: 128 hosts x 8 GPUs around a 2-host training job.

A recording is made the way a live cockpit makes one: every host's agent stream (a
stream header, a `hello` listing 8 simulated GPUs, then each second a host sample and 8
GPU samples; SIM-labelled, as the agent labels GPUs it simulates) goes into a DuckDB
store through `Store.ingest_many`, the writer's own call, `FLUSH_S` seconds of records
at a time, and the link states are recorded with `Store.set_host_state` on the
recording's clock. A 16-rank job trains on the first two hosts (train records per rank
per step, evaluations, logs, checkpoints, one interruption and its recovery). Around it
the fleet is not quiet: one host throttles, one GPU reports an XID, one GPU uncorrectable
ECC errors, one host stops streaming part-way (its link unreachable), and utilisation
and temperature move on every GPU, so that every pane has something new on every
refresh. By default the hosts sample at their own phase within each second and their
records arrive with their own delay (`--arrival jittered`), so that most flushes hold
rows stamped before the newest one stored, as a real fleet's do; `--arrival aligned`
stores each second whole.

The screen is the real app (`cockpit.ui.app_factory.make_app`) on a live source that
builds its snapshots as `cockpit.sessions.live.LiveSource` does (the store being
written, `until_ts=None`, the links' states) on the recording's clock. Before each
refresh one more second of every host's records is stored (not timed), so every
refresh reads new samples of every GPU and host and new training steps: a busy refresh,
as a live cockpit's after a second of data. (A `ReplaySource` stepped at 1x over the
same recording would be the other way; live is the harder case, as only a live refresh
finds rows that arrived after newer ones were stored.) A refresh is timed
as `bench/ui.py` times it: from the app's refresh request until the four panes hold
the new snapshot and the screen has painted what changed. The panes are whatever the
app's panes are when this runs.

Measured at 160 x 48 and at 80 x 24, for the fleet and for the same job on its 2 hosts
alone (the baseline), the four screens timed by turns (`--rounds`). Goals: the
fleet's p95 <= 50 ms at both sizes, and <= 1.5x the 2-host p95 at the same size. The
last line printed is JSON; value is the worse of the fleet's two p95s, baseline the
2-host p95 at that size.

At each size it also times Textual's floor: a bare Textual screen whose only widgets
stand where the fleet's typical refresh repainted one (the refresh with the median
count), each given new text and painted as a refresh's paint is timed. That is what
the paint of such a refresh costs with no snapshot built and no pane's text worked
out, the part of the p95 no work of the cockpit's can take away.

    .venv/bin/python bench/ui_fleet.py [--hosts 128] [--seconds 60] [--runs 60] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from textual.app import App, ComposeResult  # noqa: E402
from textual.content import Content  # noqa: E402
from textual.widgets import Static  # noqa: E402

from agent.wire.protocol import encode  # noqa: E402
from bench.result import report  # noqa: E402
from bench.ui import WARMUP, _refresh, p95, paint_pending  # noqa: E402
from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot, details  # noqa: E402
from cockpit.snapshot import Snapshot  # noqa: E402
from cockpit.store import Store  # noqa: E402
from cockpit.store.queries import StoreReader  # noqa: E402
from cockpit.ui.app_factory import make_app  # noqa: E402

GPUS = 8
JOB = "fleet-train"
JOB_HOSTS = 2
RANKS = JOB_HOSTS * GPUS
STEP_S = 0.5
T0 = 1_800_000_000.0
EVAL_EVERY = 40
CHECKPOINT_EVERY = 100
LOG_EVERY = 20
SIZES = ((160, 48), (80, 24))
GOAL_MS = 50.0
GOAL_RATIO = 1.5
# Fleet hosts with something wrong (indices; present only in a fleet that large).
THROTTLED, XID_HOST, ECC_HOST, OFFLINE = 5, 7, 9, 11
THROTTLE_THERMAL = 0x20
OFFLINE_AT = 0.6  # of the recording: where the offline host's stream ends
# Seconds of records per `ingest_many`: a writer behind a busy fleet flushes several
# seconds at once, and a flush's fixed cost would otherwise make the recording slow.
FLUSH_S = 10
REST_S = 0.25  # between timed refreshes, as the refresh gate spaces them at the soonest
Region = tuple[int, int, int, int]  # x, y, width, height on the screen


def host_name(index: int) -> str:
    return f"node-{index:03d}"


class HostStream:
    """One host's agent stream: its seq and the lines of the current flush."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = host_name(index)
        self.seq = 0
        self.lines: list[bytes] = [encode("stream", 0, {
            "protocol": 1, "agent_version": "bench", "journal_id": f"j-{self.name}",
            "from": 0, "first": 1, "head": 0}, ts=T0)]  # fmt: skip

    def add(self, t: str, ts: float, fields: dict[str, Any]) -> None:
        self.seq += 1
        self.lines.append(encode(t, self.seq, fields, ts=ts))

    def take(self) -> bytes:
        chunk, self.lines = b"".join(self.lines), []
        return chunk


def _hello(stream: HostStream) -> None:
    gpus = [{"index": g, "uuid": f"GPU-SIM-{stream.index:03d}-{g}",
             "name": "Simulated H100 80GB", "mem_total": 80 << 30, "simulated": True}
            for g in range(GPUS)]  # fmt: skip
    stream.add("hello", T0, {
        "agent_version": "bench", "protocol": 1, "hostname": stream.name,
        "boot_id": f"boot-{stream.index}", "pid": 1000 + stream.index, "python": "3.11.7",
        "platform": "Linux", "cpu_count": 96, "mem_total": 2 << 40, "gpu_source": "sim",
        "gpu_state": "simulated", "driver": None, "gpus": gpus,
        "env": {"python": "3.11.7", "torch": "2.5.0"}, "psutil": True, "interval": 1.0})


def _second(stream: HostStream, second: int, training: bool, phase: float) -> None:
    """One second of host and GPU samples, taken `phase` seconds into it, with this
    host's troubles."""
    ts = T0 + second + phase
    i = stream.index
    wave = (second * 7 + i * 13) % 20
    stream.add("host", ts, {
        "cpu": 30.0 + wave, "load1": 20.0 + wave / 2, "load5": 20.0, "load15": 19.0,
        "mem_used": (900 + wave) << 30, "mem_total": 2 << 40, "swap_used": 0,
        "swap_total": 0, "disk_path": "/data", "disk_used": (3000 + second) << 30,
        "disk_total": 7 << 40, "disk_read": 1e7 + wave * 1e5, "disk_write": 5e6,
        "net_rx": 1e9 + wave * 1e7, "net_tx": 1e9, "procs": []})
    for g in range(GPUS):
        busy = training or (i + g) % 4 != 0
        util = (93.0 + (second + g) % 6) if busy else float((second + g) % 3)
        temp = 62.0 + (second + g + i) % 12 + (20.0 if i == THROTTLED else 0.0)
        stream.add("gpu", ts, {
            "gpu": g, "uuid": f"GPU-SIM-{i:03d}-{g}", "sim": True, "util": util,
            "mem_util": util * 0.45, "mem_used": (60 if busy else 1) << 30,
            "mem_total": 80 << 30, "temp": temp, "power": 250.0 + util * 4,
            "power_limit": 700.0, "sm_clock": 1500 if i == THROTTLED else 1980,
            "mem_clock": 2619, "fan": None,
            "throttle": THROTTLE_THERMAL if i == THROTTLED else 0,
            "ecc_vol_corr": 0, "ecc_vol_unc": second if (i == ECC_HOST and g == 2) else 0,
            "ecc_agg_corr": 0, "ecc_agg_unc": second if (i == ECC_HOST and g == 2) else 0,
            "retired_pages": 0, "remap_pending": False, "pcie_tx": 1e9, "pcie_rx": 2e9,
            "pcie_replay": 0, "nvlink_err": 0, "procs": []})
    if i == XID_HOST and second % 30 == 10:
        stream.add("event", ts + 0.01, {"kind": "xid", "job": None, "rank": None,
                                        "step": None, "msg": "XID 79 on GPU 3",
                                        "data": {"gpu": 3, "xid": 79}})  # fmt: skip


class Job:
    """The 16-rank job on the first two hosts: one step per `STEP_S` per rank."""

    def __init__(self, seconds: int) -> None:
        self.steps = int((seconds - 10) / STEP_S)
        self.restart_at = self.steps // 2

    def second(self, streams: list[HostStream], second: int) -> None:
        head = streams[0]
        if second == 5:
            head.add("event", T0 + 5, {"kind": "job_started", "job": JOB, "rank": None,
                                       "step": None, "msg": "job started", "data": {}})
            head.add("run", T0 + 5.5, {
                "job": JOB, "rank": 0, "world_size": RANKS, "total_steps": self.steps * 2,
                "stages": ["train"], "config": {"lr": 3e-4}, "flops_per_step": 4e15,
                "peak_flops": 9.9e14})
        first = max(0, int((second - 10) / STEP_S))
        last = int((second + 1 - 10) / STEP_S)
        for step in range(first + 1, last + 1) if second >= 10 else ():
            ts = T0 + 10 + step * STEP_S
            for rank in range(RANKS):
                stream = streams[rank // GPUS]
                stream.add("train", ts + rank * 1e-3, {
                    "job": JOB, "rank": rank, "step": step, "epoch": step / 1000,
                    "stage": "train", "loss": 2.0 / (1 + step / 400) + 0.4 + (rank % 3) * 0.01
                    + (1.5 if step == self.restart_at + 3 else 0.0),
                    "nonfinite": None, "lr": 3e-4, "samples": 16, "tokens": 32768,
                    "step_time": STEP_S - 0.01 + (step % 5) * 0.004, "data_time": 0.01,
                    "compute_time": 0.35, "comm_time": 0.08, "ckpt_time": None,
                    "loss_scale": 65536.0, "grad_norm": 1.0 + (step % 7) * 0.1, "extra": {}})
            if step % EVAL_EVERY == 0:
                head.add("eval", ts + 0.2, {"job": JOB, "rank": 0, "step": step,
                                            "loss": 1.5 / (1 + step / 400) + 0.6,
                                            "metrics": {"acc": min(0.9, step / 1000)}})
            if step % LOG_EVERY == 0:
                head.add("log", ts + 0.25, {"job": JOB, "rank": 0, "stream": "stdout",
                                            "line": f"step {step} loss ok"})
            if step % CHECKPOINT_EVERY == 0:
                head.add("event", ts + 0.3, {
                    "kind": "checkpoint_saved", "job": JOB, "rank": 0, "step": step,
                    "msg": "checkpoint saved", "data": {"seconds": 4.0, "bytes": 1 << 30}})
            if step == self.restart_at:
                tail = streams[1]
                cause = "killed"  # as the agent classifies it (agent.wire.causes)
                tail.add("event", ts + 0.15, {
                    "kind": "interruption", "job": JOB, "rank": None, "step": step,
                    "msg": "rank 11 exited", "data": {
                        "cause": cause, "detected_at": ts, "where": {"rank": 11},
                        "evidence": ["rank 11 (pid 4242) killed (SIGKILL)"]}})
                tail.add("event", ts + 0.4, {
                    "kind": "recovery", "job": JOB, "rank": None, "step": step,
                    "msg": "job recovered", "data": {"cause": cause, "recovery_seconds": 0.25,
                                                     "steps_lost": 3, "restart_count": 1}})


class Recording:
    """A fleet's store being written as a live cockpit writes it, one flush at a time.

    `jittered`: each host samples at its own phase within the second and each sample
    reaches the store 5 to 60 ms later, so a flush holds some hosts' samples of a
    second and the next flush the rest, some stamped before the newest stored (late
    rows, as a real fleet's are); otherwise every host samples 0.1 s into the
    second (a tenth of a millisecond apart) and each second is stored whole."""

    def __init__(self, path: Path, hosts: int, seconds: int, jittered: bool = False) -> None:
        self.store = Store(path)
        self.streams = [HostStream(i) for i in range(hosts)]
        self.draw = random.Random(7)
        self.jittered = jittered
        self.phase = [self.draw.random() if jittered else 0.1 + i * 1e-4
                      for i in range(hosts)]
        self.held: dict[int, list[bytes]] = {}  # samples still on their way
        for stream in self.streams:
            _hello(stream)
        self.job = Job(seconds)
        self.offline_after = int(seconds * OFFLINE_AT)
        self.down: set[str] = set()
        self.second = 0
        self.records = 0

    @property
    def now(self) -> float:
        """The wall clock of the recording: just after the last second written."""
        return T0 + self.second + 0.5

    def states(self) -> dict[str, str]:
        """The links' states, as the fleet reports them to a live source."""
        return {s.name: "unreachable" if self.offline(s) else "streaming"
                for s in self.streams}  # fmt: skip

    def offline(self, stream: HostStream) -> bool:
        return stream.index == OFFLINE and self.second >= self.offline_after

    def advance(self, seconds: int) -> None:
        """`seconds` more seconds of every host's records, in one flush."""
        for _ in range(seconds):
            self.job.second(self.streams[:JOB_HOSTS], self.second)
            for stream in self.streams:
                if self.offline(stream):
                    continue
                i = stream.index
                ready, stream.lines = stream.lines, []
                _second(stream, self.second, i < JOB_HOSTS, self.phase[i])
                # In the host's own order: what arrived before this second (this flush's
                # earlier seconds), then last second's late samples, then this second's.
                sampled, stream.lines = stream.lines, [*ready, *self.held.pop(i, [])]
                # Flushed at the end of the second: what arrives later waits for the next.
                delay = self.draw.uniform(0.005, 0.06) if self.jittered else 0.0
                if self.phase[i] + delay > 1.0:
                    self.held[i] = sampled
                else:
                    stream.lines.extend(sampled)
            self.second += 1
        chunks = [(stream.name, stream.take()) for stream in self.streams]
        self.records += sum(chunk.count(b"\n") for _, chunk in chunks)
        result = self.store.ingest_many([(name, chunk) for name, chunk in chunks if chunk])
        # Every line sent is new and well formed: one out of its host's order would be
        # taken for a repeat (its seq at or below the host's mark) and not stored.
        if result.duplicates or result.malformed or result.failed:
            raise RuntimeError(f"the recording lost records: {result}")
        for stream in self.streams:  # what the fleet's state callback records
            if self.offline(stream) and stream.name not in self.down:
                self.down.add(stream.name)
                self.store.set_host_state(stream.name, "unreachable", "connection lost",
                                          ts=self.now)

    def close(self) -> None:
        self.store.close()


class LiveFleet:
    """A live source over a `Recording`: what `cockpit.sessions.live.LiveSource` builds
    (the whole store, `until_ts=None`, the links' states, the wall clock) with the
    recording's clock for the wall clock."""

    controller = None
    focus_job = None
    label = "LIVE"

    def __init__(self, recording: Recording) -> None:
        self._recording = recording
        self._reader = StoreReader(recording.store)

    def start(self, on_data: Callable[[], None]) -> None:
        on_data()

    def snapshot(self, buckets: int = SNAPSHOT_BUCKETS) -> Snapshot:
        return build_snapshot(self._reader, until_ts=None, label=self.label, buckets=buckets,
                              host_states=self._recording.states(), controllable=False,
                              now=self._recording.now)  # fmt: skip

    def details(self, what: Any, **kw: Any) -> object:
        return details(self._reader, what, **kw)

    def stop(self) -> None:
        pass


def build(path: Path, hosts: int, history: int, total: int,
          jittered: bool = False) -> Recording:
    """A recording of `hosts` hosts with `history` seconds written (of `total`)."""
    recording = Recording(path, hosts, total, jittered)
    recording.offline_after = int(history * OFFLINE_AT)  # down before the timed part
    for stream in recording.streams:
        recording.store.set_host_state(stream.name, "streaming", "from seq 0",
                                       f"10.0.{stream.index // 250}.{stream.index % 250 + 1}",
                                       ts=T0)
    while recording.second < history:
        recording.advance(min(FLUSH_S, history - recording.second))
    recording.store.checkpoint()
    return recording


async def time_screen(recording: Recording, size: tuple[int, int], runs: int,
                      split: list[tuple[float, float]],
                      painted: list[list[Region]]) -> tuple[list[float], list[float]]:
    """Milliseconds per busy full refresh of the main screen at `size`, each after one
    more second of the fleet's records was stored (not timed): wall time, and this
    process's CPU time over the same span (every thread: DuckDB's too), which a machine
    busy with other work inflates less. `split` gets each timed refresh's (until the
    panes hold the snapshot, the paint after it), as `bench/ui.py`'s `_refresh` splits
    it; `painted` the regions each timed refresh repainted."""
    app = make_app(LiveFleet(recording))
    wall, cpu = [], []
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        for i in range(runs + WARMUP):
            recording.advance(1)
            # CPU until `_refresh` returns: that includes its settling after the timed
            # span (a pause until idle), so this figure is an upper bound.
            cpu0 = time.process_time()
            timed = i >= WARMUP
            wall.append(await _refresh(app, pilot, split if timed else None,
                                       painted if timed else None))
            cpu.append((time.process_time() - cpu0) * 1000)
            # A live cockpit rests between refreshes (its gate starts one a quarter of a
            # second after the last at the soonest): what the app defers until after a
            # paint, the collector's turn among it, runs there, untimed, as it would.
            await asyncio.sleep(REST_S)
    return wall[WARMUP:], cpu[WARMUP:]


class FloorApp(App[None]):
    """A bare Textual screen of one Static per region, where the main screen's refresh
    repainted a widget: what painting that much of the screen costs Textual, with no
    snapshot to build and no pane to work out its text."""

    CSS = "Static.cell { position: absolute; text-wrap: nowrap; text-overflow: clip; }"

    def __init__(self, regions: list[Region]) -> None:
        super().__init__()
        self.regions = regions

    def compose(self) -> ComposeResult:
        for x, y, width, height in self.regions:
            cell = Static("", classes="cell")
            cell.styles.offset = (x, y)
            cell.styles.width = width
            cell.styles.height = height
            yield cell


def _floor_text(width: int, height: int, refresh: int) -> Content:
    """`height` lines of numbers that change with every refresh, one in three bold: a
    line of several styled runs, as a pane's lines are."""
    lines = []
    for y in range(height):
        parts: list[tuple[str, str]] = []
        filled = k = 0
        while filled < width:
            word = f"{(refresh * 7919 + y * 131 + k * 17) % 100_000:>6}"
            parts.append((word, "bold" if k % 3 == 0 else ""))
            filled += len(word)
            k += 1
        lines.append(Content.assemble(*parts))
    return Content("\n").join(lines)


async def time_floor(size: tuple[int, int], regions: list[Region], runs: int) -> list[float]:
    """Milliseconds per repaint of `regions` on a bare screen at `size`, timed as a
    refresh's paint is (`paint_pending`): new text set on every region, then painted."""
    app = FloorApp(regions)
    out = []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        cells = list(app.query(Static))
        for i in range(runs + WARMUP):
            texts = [_floor_text(w, h, i) for _, _, w, h in regions]  # made untimed
            start = time.perf_counter()
            for cell, text in zip(cells, texts, strict=True):
                cell.update(text, layout=False)
            await paint_pending(app.screen)
            out.append((time.perf_counter() - start) * 1000)
            await pilot.pause()
    return out[WARMUP:]


def typical(painted: list[list[Region]]) -> list[Region]:
    """The regions of the refresh that repainted the median number of widgets."""
    ordered = sorted(painted, key=len)
    return ordered[len(ordered) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--seconds", type=int, default=60,
                        help="seconds of history before the timed refreshes (the job "
                             "trains from second 10)")
    # 60 per screen: a p95 of 20 was the second-worst refresh, and moved by several ms
    # from run to run; 60 also reach the job's interruption, whose log line lays the
    # screen out again. The whole bench takes about two minutes (most of it the pauses
    # between refreshes).
    parser.add_argument("--runs", type=int, default=60, help="timed refreshes per screen")
    # The screens take turns: each is timed in `rounds` spells of runs/rounds refreshes,
    # one after another in rotation, so that a slow spell of the machine (a shared
    # virtual machine's speed moves by a fifth from minute to minute) falls on every
    # screen alike rather than on the one timed then, and the ratios compare like with
    # like. Six spells of ten: a spell is then about four seconds, a round of the four
    # screens about twenty, shorter than the machine's slow spells; with three of twenty
    # a slow spell often fell on one screen's spell alone, and its three slowest
    # refreshes made that screen's p95.
    parser.add_argument("--rounds", type=int, default=6,
                        help="spells each screen is timed in, in rotation (runs/rounds each)")
    parser.add_argument("--arrival", choices=("jittered", "aligned"), default="jittered",
                        help="jittered (default): each host samples at its own phase and "
                             "its records arrive with their own delay, so most flushes hold "
                             "rows stamped before the newest stored, as a real fleet's do; "
                             "aligned: every host samples at one instant, each second is "
                             "stored whole")
    args = parser.parse_args()
    if args.hosts <= OFFLINE:
        parser.error(f"--hosts must be more than {OFFLINE} (the fleet's troubled hosts)")
    started = time.perf_counter()
    figures: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    splits: dict[str, list[tuple[float, float]]] = {}
    painted: dict[str, list[list[Region]]] = {}
    if args.rounds < 1 or args.runs % args.rounds:
        parser.error("--runs must be a multiple of --rounds")
    spell = args.runs // args.rounds
    total = args.seconds + len(SIZES) * args.rounds * (spell + WARMUP) + 5
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-ui-fleet-") as tmp:
        recordings = {}
        for name, hosts in (("fleet", args.hosts), ("job", JOB_HOSTS)):
            begun = time.perf_counter()
            recordings[name] = build(Path(tmp) / f"{name}.duckdb", hosts, args.seconds, total,
                                     jittered=args.arrival == "jittered")
            print(f"{name:5} {hosts:4d} hosts x {GPUS} GPUs: "
                  f"{recordings[name].records:,} records in "
                  f"{time.perf_counter() - begun:.1f} s", flush=True)
        for _ in range(args.rounds):
            for width, height in SIZES:
                for name in ("fleet", "job"):
                    key = f"{name}_{width}x{height}"
                    wall, used = asyncio.run(time_screen(
                        recordings[name], (width, height), spell, splits.setdefault(key, []),
                        painted.setdefault(key, [])))
                    figures.setdefault(key, []).extend(wall)
                    cpu.setdefault(key, []).extend(used)
        for key, times in figures.items():
            parts = splits[key]
            print(f"{key:14} p95 {p95(times):7.1f} ms  median "
                  f"{statistics.median(times):7.1f} ms  (CPU p95 {p95(cpu[key]):7.1f} ms;"
                  f" median {statistics.median(p[0] for p in parts):.1f} ms until the "
                  f"panes hold the snapshot, {statistics.median(p[1] for p in parts):.1f}"
                  " ms of paint)", flush=True)
        for recording in recordings.values():
            recording.close()
    # What Textual alone costs to paint what the fleet's typical refresh repainted: the
    # part of each refresh no snapshot or pane work can take away.
    floors = {}
    for width, height in SIZES:
        regions = typical(painted[f"fleet_{width}x{height}"])
        floors[f"{width}x{height}"] = (len(regions), asyncio.run(
            time_floor((width, height), regions, args.runs)))
    for size, (count, times) in floors.items():
        print(f"floor {size:8} p95 {p95(times):7.1f} ms  median {statistics.median(times):7.1f}"
              f" ms  (a bare Textual screen repainting the {count} widgets' regions the "
              "fleet's typical refresh repainted: no snapshot, no pane)", flush=True)
    per_size = {f"{w}x{h}": (p95(figures[f"fleet_{w}x{h}"]), p95(figures[f"job_{w}x{h}"]))
                for w, h in SIZES}  # fmt: skip
    worst = max(per_size, key=lambda size: per_size[size][0])
    value, baseline = per_size[worst]
    ratios = {size: fleet / job for size, (fleet, job) in per_size.items()}
    passed = all(fleet <= GOAL_MS for fleet, _ in per_size.values()) and all(
        r <= GOAL_RATIO for r in ratios.values())
    wall = time.perf_counter() - started
    return report(
        "ui_fleet", round(value, 2), "ms (p95 full refresh)", round(baseline, 2),
        goal=f"value <= {GOAL_MS:g} at every size and ratio <= {GOAL_RATIO:g} at every size",
        passed=passed, metric="refresh_p95_ms",
        baseline_name=f"the same screen ({worst}) with the job's {JOB_HOSTS} hosts only",
        hosts=args.hosts, gpus=args.hosts * GPUS, worst_size=worst, runs=args.runs,
        rounds=args.rounds,
        arrival=args.arrival,
        **{f"{name}_p95_ms": round(p95(times), 2) for name, times in figures.items()},
        **{f"{name}_cpu_p95_ms": round(p95(times), 2) for name, times in cpu.items()},
        **{f"{name}_{part}_median_ms": round(statistics.median(p[i] for p in parts), 2)
           for name, parts in splits.items() for i, part in enumerate(("to_panes", "paint"))},
        **{f"ratio_{size}": round(r, 3) for size, r in ratios.items()},
        **{f"textual_floor_{size}_p95_ms": round(p95(times), 2)
           for size, (_, times) in floors.items()},
        **{f"textual_floor_{size}_widgets": count for size, (count, _) in floors.items()},
        bench_wall_s=round(wall, 1),
    )


if __name__ == "__main__":
    sys.exit(main())
