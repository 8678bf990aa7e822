"""Main-screen refresh cost against run length, and cockpit memory over a long replay.

Builds two recordings inside DuckDB (`bench/ui_store.py`: 8 ranks on 2 hosts, one GPU
per rank, GPU and host samples every second, evaluations, checkpoints, logs, events,
alerts; level tables filled and clustered as ingest and maintenance do): a short one
(`--small` steps, 1 K by default) and a long one (`--steps`, 1.25 M steps × 8 ranks =
10 M train rows by default, about 4 days of training).

For each it measures, over `--runs` refreshes after a warm-up:

- `build_snapshot` alone, as a live cockpit calls it (`until_ts=None`, the whole
  recording) and as a replay does (a cursor near the end, moved on each refresh);
  the recording is finished, so a live refresh finds no new row and answers from what
  the reader remembers (a quiet run), while each replay refresh moves one second of
  steps and samples into view and reads them (a busy one);
- the full refresh in the real app, headless at 160 × 48: the refresh worker the app
  starts (`CockpitApp._build_snapshot`), the snapshot set on the four panes, and the
  screen's paint of what changed, timed from the request until the panes hold the new
  snapshot and the paint is done (`paint_pending`: the widgets' repaint requests let
  through, then the screen's update called at once, so no timer tick is counted).
  `pilot.pause()`, which waits until the whole process looks idle, runs after the
  timed span and is not counted. The replay refreshes' two parts (until the panes hold
  the snapshot; the paint after it) are reported too.

Then, in a child process (so the building above does not count), it replays the long
recording at `--speed` (100×) for `--hour` simulated wall seconds on an injected clock,
refreshing the app every `--every` simulated seconds, and reports peak RSS after ten
simulated minutes and at the end.

Goals: full-refresh p95 (the worse of live and replay) <= 50 ms on the long recording
and <= 1.5× the short one's; peak RSS at the end <= 1.1× the ten-minute figure. The
last line printed is JSON.

    .venv/bin/python bench/ui.py [--steps 1250000] [--small 1000] [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.result import report  # noqa: E402
from bench.ui_store import RANKS, build  # noqa: E402
from cockpit.read.source import (  # noqa: E402
    SNAPSHOT_BUCKETS,
    build_snapshot,
    details,
)
from cockpit.sessions.replay import ReplaySource  # noqa: E402
from cockpit.snapshot import Snapshot  # noqa: E402
from cockpit.store import Store  # noqa: E402
from cockpit.store.queries import StoreReader  # noqa: E402
from cockpit.ui.app_factory import make_app  # noqa: E402
from cockpit.ui.widgets.pane import Pane  # noqa: E402

SIZE = (160, 48)
WARMUP = 3
REPLAY_AT = 0.95  # replay cursor, as a fraction of the recording (see `replay_start`)
REPLAY_STEP_S = 1.0  # recording seconds the cursor moves between refreshes
TEN_MINUTES_S = 600.0  # simulated wall seconds of replay to the first memory figure
GOAL_MS = 50.0
GOAL_RATIO = 1.5
GOAL_RSS = 1.1


class RecordedLive:
    """A `Source` reading a finished recording the way the live source reads its store
    (`until_ts=None`): what a cockpit attached to a long run computes on each refresh."""

    controller = None
    focus_job = None
    label = "LIVE"

    def __init__(self, path: Path) -> None:
        self._store = Store(path, read_only=True)
        self._reader = StoreReader(self._store)
        # Ages are measured from the wall clock, as live does, as if the newest record
        # had arrived when the source started.
        self._end = (self._reader.time_range() or (0.0, 0.0))[1]
        self._started = time.monotonic()

    def start(self, on_data: Callable[[], None]) -> None:
        on_data()

    def snapshot(self, buckets: int = 120) -> Snapshot:
        now = self._end + time.monotonic() - self._started
        return build_snapshot(self._reader, until_ts=None, label=self.label, buckets=buckets,
                              now=now)

    def details(self, what: str, **kw: Any) -> object:
        return details(self._reader, what, **kw)

    def stop(self) -> None:
        self._store.close()


class FakeClock:
    """Wall clock for ReplaySource that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay_start(lo: float, hi: float, refreshes: int) -> float:
    """Where the replay cursor starts, as a fraction of the recording: at `REPLAY_AT`,
    or earlier on a recording too short for every refresh to find new rows before the
    end (a refresh past the end is a quiet one, and would flatter the short figure)."""
    span = hi - lo
    if span <= 0:
        return REPLAY_AT
    return max(0.0, min(REPLAY_AT, 1.0 - (refreshes + 2) * REPLAY_STEP_S / span))


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def time_build(path: Path, runs: int, replay: bool) -> list[float]:
    """Milliseconds per `build_snapshot` (live: whole recording; replay: moving cursor)."""
    out = []
    with Store(path, read_only=True) as store:
        reader = StoreReader(store)
        lo, hi = reader.time_range() or (0.0, 0.0)
        at = replay_start(lo, hi, runs + WARMUP)
        for i in range(runs + WARMUP):
            until = lo + at * (hi - lo) + i * REPLAY_STEP_S if replay else None
            start = time.perf_counter()
            build_snapshot(reader, until_ts=until, label="bench", buckets=SNAPSHOT_BUCKETS)
            out.append((time.perf_counter() - start) * 1000)
    return out[WARMUP:]


def _arrivals(app: Any) -> asyncio.Event:
    """An event set each time the main screen takes a snapshot (its panes have taken it
    by then). Waiting on it instead of polling keeps the event loop from waking every
    millisecond and taking the GIL from the worker that builds the snapshot."""
    arrived = getattr(app, "_bench_arrived", None)
    if arrived is None:
        arrived = app._bench_arrived = asyncio.Event()
        screen = app.main_screen
        screen.watch(screen, "snapshot", lambda _new: arrived.set(), init=False)
    return arrived


async def paint_pending(screen: Any,
                        painted: list[list[tuple[int, int, int, int]]] | None = None) -> None:
    """Let the widgets' repaint requests through, then paint the screen at once.

    The widgets' refresh requests become Update messages, which the screen turns into
    its set of dirty widgets; the messages are let through until no widget has a repaint
    or layout pending, and the screen's update is then called directly, so that no timer
    granularity is counted. `painted` gets the screen regions (x, y, width, height) of
    the widgets the paint redraws."""
    while True:
        await asyncio.sleep(0)
        if screen._message_queue.empty() and not any(
            w._repaint_required or w._layout_required
            for w in screen.walk_children(with_self=True)
        ):
            break
    if painted is not None:  # read before the paint, which clears the set
        painted.append([tuple(w.region) for w in screen._dirty_widgets if w is not screen])
    screen._on_timer_update()


async def _refresh(app: Any, pilot: Any, split: list[tuple[float, float]] | None = None,
                   painted: list[list[tuple[int, int, int, int]]] | None = None) -> float:
    """One refresh as the app does it, timed until the panes hold the new snapshot and
    the screen has painted what changed.

    The app starts its refresh worker; when the worker's snapshot has been handed to the
    panes, their widgets ask for repaints through Textual's messages, and the screen
    paints the widgets marked dirty on its next update tick: here at once, once the
    screen has taken in those messages (`paint_pending`). `pilot.pause()` is
    kept out of the timing: it waits for the whole process to look idle, which takes
    longer than the refresh itself.

    `split` gets (milliseconds until the panes hold the snapshot: build and hand-over;
    milliseconds from there to the end: the repaint requests and the paint), and
    `painted` the regions of the widgets the paint redrew (`paint_pending`).
    """
    arrived = _arrivals(app)
    arrived.clear()
    start = time.perf_counter()
    app._build_snapshot()
    await arrived.wait()
    ready = time.perf_counter()
    await paint_pending(app.screen, painted)
    end = time.perf_counter()
    elapsed = (end - start) * 1000
    if split is not None:
        split.append(((ready - start) * 1000, (end - ready) * 1000))
    panes = list(app.main_screen.query(Pane))
    if len(panes) != 4 or any(p.snapshot != app.snapshot for p in panes):
        raise RuntimeError("the refresh did not reach the four panes")
    await app.workers.wait_for_complete()
    await pilot.pause()
    return elapsed


async def time_app(path: Path, runs: int, replay: bool,
                   split: list[tuple[float, float]] | None = None) -> list[float]:
    """Milliseconds per full refresh of the main screen in the real app (`split`: see
    `_refresh`, for the timed refreshes)."""
    clock = FakeClock()
    source: Any
    if replay:
        source = ReplaySource(path, speed=1.0, clock=clock, tick=3600.0)
        with Store(path, read_only=True) as store:
            lo, hi = StoreReader(store).time_range() or (0.0, 0.0)
        source.seek_to(replay_start(lo, hi, runs + WARMUP))
    else:
        source = RecordedLive(path)
    app = make_app(source)
    out = []
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        for i in range(runs + WARMUP):
            clock.now += REPLAY_STEP_S
            out.append(await _refresh(app, pilot, split if i >= WARMUP else None))
    return out[WARMUP:]


def peak_rss_mib() -> float:
    """Peak RSS of this process. Linux keeps `ru_maxrss` across exec (the child would
    report the parent's peak), so the memory map's own high-water mark is read there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def replay_memory(path: Path, speed: float, hour: float, every: float) -> dict:
    """Replay at `speed` for `hour` simulated wall seconds, refreshing every `every`, or
    until the replay reaches the recording's end (a recording shorter than `speed` x
    `hour`): a refresh there shows the same snapshot, which the panes never take again."""
    clock = FakeClock()
    source = ReplaySource(path, speed=speed, clock=clock, tick=hour * 10)
    app = make_app(source)
    at_ten = None
    refreshes = 0
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        while clock.now < hour and source.position < source.end_ts:
            clock.now += every
            await _refresh(app, pilot)
            refreshes += 1
            if at_ten is None and clock.now >= TEN_MINUTES_S:
                at_ten = peak_rss_mib()
        position = source.position
    return {"rss_10min_mib": at_ten, "rss_end_mib": peak_rss_mib(), "refreshes": refreshes,
            "replayed_s": position - source.start_ts}


def summary(times: list[float]) -> str:
    return f"p95 {p95(times):7.1f} ms  median {statistics.median(times):7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1_250_000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--hour", type=float, default=3600.0,
                        help="simulated wall seconds of replay for the memory figure")
    parser.add_argument("--every", type=float, default=15.0,
                        help="simulated wall seconds between refreshes in the memory run")
    parser.add_argument("--memory-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hour <= TEN_MINUTES_S:
        parser.error(f"--hour must be over {TEN_MINUTES_S:g}: the end's memory is set against "
                     "the figure after ten simulated minutes")
    if args.memory_child is not None:
        print(json.dumps(asyncio.run(
            replay_memory(args.memory_child, args.speed, args.hour, args.every))))
        return 0
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-ui-") as tmp:
        small, big = Path(tmp) / "small.duckdb", Path(tmp) / "big.duckdb"
        built_small = build(small, args.small)
        built_big = build(big, args.steps)
        print(f"built {args.small:,} steps in {built_small:.1f} s, {args.steps:,} steps "
              f"({args.steps * RANKS:,} train rows) in {built_big:.1f} s "
              f"({big.stat().st_size / 2**20:.0f} MiB)", flush=True)
        figures: dict[str, dict[str, list[float]]] = {}
        # Per busy refresh: (until the panes hold the snapshot, the paint after that).
        splits: dict[str, list[tuple[float, float]]] = {}
        for name, path in (("small", small), ("big", big)):
            figures[name] = {
                "build_live": time_build(path, args.runs, replay=False),
                "build_replay": time_build(path, args.runs, replay=True),
                "app_live": asyncio.run(time_app(path, args.runs, replay=False)),
                "app_replay": asyncio.run(time_app(path, args.runs, replay=True,
                                                   split=splits.setdefault(name, []))),
            }
            for what, times in figures[name].items():
                print(f"{name:5} {what:12} {summary(times)}", flush=True)
            parts = splits[name]
            print(f"{name:5} app_replay   median {statistics.median(p[0] for p in parts):.1f} "
                  f"ms until the panes hold the snapshot (build, hand-over), "
                  f"{statistics.median(p[1] for p in parts):.1f} ms of repaint after it",
                  flush=True)
        child = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(big), "--speed", str(args.speed),
             "--hour", str(args.hour), "--every", str(args.every)],
            capture_output=True, text=True, check=True,
        )
        memory = json.loads(child.stdout.strip().splitlines()[-1])
    if memory["rss_10min_mib"] is None:
        sys.exit(f"the replay reached the end of the {args.steps:,}-step recording before ten "
                 f"simulated minutes at {args.speed:g}x: give more --steps or a lower --speed")
    # The headline is the worse of the quiet (live, nothing new) and the busy (replay,
    # new rows every refresh) full refresh: a cockpit watching a training run refreshes
    # because data arrived, so the quiet figure alone would flatter it.
    value = max(p95(figures["big"]["app_live"]), p95(figures["big"]["app_replay"]))
    baseline = max(p95(figures["small"]["app_live"]), p95(figures["small"]["app_replay"]))
    ratio = value / baseline
    rss_ratio = memory["rss_end_mib"] / memory["rss_10min_mib"]
    p95s = {f"{n}_{w}_p95_ms": round(p95(t), 2) for n, f in figures.items() for w, t in f.items()}
    for what in ("build_live", "build_replay", "app_replay"):
        r = p95(figures["big"][what]) / p95(figures["small"][what])
        print(f"ratio long/short {what:12} {r:.2f}")
    print(f"full refresh (worse of live, replay): p95 {value:.1f} ms at {args.steps:,} steps, "
          f"{baseline:.1f} ms "
          f"at {args.small:,} steps, ratio {ratio:.2f}")
    print(f"replay memory at {args.speed:g}x over {memory['replayed_s'] / 3600:.1f} h of "
          f"recording ({memory['refreshes']} refreshes): peak RSS {memory['rss_10min_mib']:.0f} "
          f"MiB after 10 min, {memory['rss_end_mib']:.0f} MiB at the end, ratio {rss_ratio:.3f}")
    return report(
        "ui", round(value, 2), "ms (p95 full refresh)", round(baseline, 2),
        goal=f"value <= {GOAL_MS:g} and ratio <= {GOAL_RATIO:g} and rss_ratio <= {GOAL_RSS:g}",
        passed=value <= GOAL_MS and ratio <= GOAL_RATIO and rss_ratio <= GOAL_RSS,
        metric="refresh_p95_ms", baseline_name=f"same refresh at {args.small} steps",
        steps=args.steps, small_steps=args.small, train_rows=args.steps * RANKS,
        ranks=RANKS, runs=args.runs, **p95s,
        rss_10min_mib=round(memory["rss_10min_mib"], 1),
        rss_end_mib=round(memory["rss_end_mib"], 1), rss_ratio=round(rss_ratio, 3),
        memory_refreshes=memory["refreshes"],
        **{f"{n}_app_replay_{part}_median_ms":
           round(statistics.median(p[i] for p in splits[n]), 2)
           for n in splits for i, part in enumerate(("to_panes", "paint"))},
    )


if __name__ == "__main__":
    sys.exit(main())
