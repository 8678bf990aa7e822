"""Replay a recording: the same snapshots as live, at a virtual clock you control.

The clock starts at the recording's first record and advances at `speed` times real
time; every snapshot is built with `until_ts` = the clock, so the UI sees exactly what
a live cockpit would have seen at that instant and nothing after it. Pausing freezes
the clock; seeking moves it (clamped to the recording); reaching the end pauses.

A replay walks through the whole file, and DuckDB keeps every block it has read in its
buffer pool until the pool reaches its limit (by default most of the machine's
memory), so the cockpit's memory would grow with the part of the recording played so
far. The pool is therefore capped (`MEMORY_LIMIT`): a snapshot reads a few recent row
groups and the chart level rows, and blocks evicted from the pool are read back from
the operating system's file cache.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cockpit.errors import CockpitError
from cockpit.read.compare import Comparison
from cockpit.read.details import DetailKind, Details
from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot, details
from cockpit.snapshot import Snapshot
from cockpit.store.database import Store, StoreError
from cockpit.store.queries import StoreReader

TICK_S = 0.25  # on_data ~4x per second while playing
MEMORY_LIMIT = "64MB"  # DuckDB buffer pool of a replay (see the module docstring)
STOP_WAIT_S = 10.0  # at most this long for a read in flight when the replay stops


class ReplaySource:
    controller = None  # a recording has no job to control
    focus_job: str | None = None  # the operator's pick among jobs training side by side

    def __init__(self, path: str | Path, speed: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic, tick: float = TICK_S) -> None:
        _check_speed(speed)
        self.recording = Path(path)  # the file replayed (screenshots go next to it)
        try:
            self._store = Store(path, read_only=True, memory_limit=MEMORY_LIMIT)
        except StoreError as exc:
            raise CockpitError(str(exc)) from None
        self._reader = StoreReader(self._store)
        try:
            span = self._reader.time_range()
        except StoreError as exc:
            self._store.close()
            raise CockpitError(str(exc)) from None
        if span is None:
            self._store.close()
            raise CockpitError(f"{path}: the recording holds no records to replay")
        self.start_ts, self.end_ts = span
        self._clock = clock
        self._tick = tick
        self._lock = threading.Lock()
        self._speed = float(speed)
        self._anchor_pos = self.start_ts
        self._anchor_clock = clock()
        self._playing = True
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._reads = threading.Condition()  # guards the two below
        self._busy = 0  # snapshots and details being read now
        self._closing = False
        self._thread: threading.Thread | None = None

    # -- the clock -------------------------------------------------------------------

    def _position_locked(self) -> float:
        pos = self._anchor_pos
        if self._playing:
            pos += (self._clock() - self._anchor_clock) * self._speed
            if pos >= self.end_ts:
                pos = self.end_ts
                self._anchor_pos, self._anchor_clock, self._playing = pos, self._clock(), False
                # Whoever noticed the end first (a tick, a label read), the screen must
                # still be shown the end, paused: not left on the tick before it.
                self._dirty.set()
        return min(max(pos, self.start_ts), self.end_ts)

    def _move_locked(self, pos: float) -> None:
        self._anchor_pos = min(max(pos, self.start_ts), self.end_ts)
        self._anchor_clock = self._clock()
        self._dirty.set()

    @property
    def position(self) -> float:
        """The replay cursor (epoch seconds): nothing after it is visible."""
        with self._lock:
            return self._position_locked()

    @property
    def fraction(self) -> float:
        span = self.end_ts - self.start_ts
        return (self.position - self.start_ts) / span if span > 0 else 1.0

    @property
    def playing(self) -> bool:
        with self._lock:
            self._position_locked()
            return self._playing

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def label(self) -> str:
        return f"REPLAY {self._speed:g}x" + ("" if self.playing else " PAUSED")

    def pause(self) -> None:
        with self._lock:
            self._move_locked(self._position_locked())
            self._playing = False

    def resume(self) -> None:
        """Play on; at the end of the recording, play again from the start."""
        with self._lock:
            pos = self._position_locked()
            self._move_locked(self.start_ts if pos >= self.end_ts else pos)
            self._playing = True

    def set_speed(self, speed: float) -> None:
        _check_speed(speed)
        with self._lock:
            self._move_locked(self._position_locked())
            self._speed = float(speed)

    def seek(self, seconds: float) -> None:
        """Move the cursor by `seconds` of recording time (negative: back), clamped."""
        with self._lock:
            self._move_locked(self._position_locked() + seconds)

    def seek_target(self, seconds: float) -> float:
        """Where `seek(seconds)` would move the cursor now (clamped to the recording)."""
        with self._lock:
            return min(max(self._position_locked() + seconds, self.start_ts), self.end_ts)

    def seek_to(self, fraction: float) -> None:
        """Jump to a point of the recording, 0.0 = first record, 1.0 = last."""
        with self._lock:
            frac = min(max(fraction, 0.0), 1.0)
            self._move_locked(self.start_ts + frac * (self.end_ts - self.start_ts))

    # -- the Source interface ------------------------------------------------------------

    def start(self, on_data: Callable[[], None]) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, args=(on_data,), name="replay-clock", daemon=True
        )
        self._thread.start()

    def _run(self, on_data: Callable[[], None]) -> None:
        on_data()
        while not self._stopped.wait(self._tick):
            # Cleared only when seen set: a seek or pause that sets it between a look
            # and a clear must not be wiped unseen (the screen would keep the old
            # cursor until the next key). A set after the clear is seen at the next tick.
            moved = self._dirty.is_set()
            if moved:
                self._dirty.clear()
            if moved or self.playing:
                on_data()

    def snapshot(self, buckets: int = SNAPSHOT_BUCKETS) -> Snapshot:
        with self._reading():
            return build_snapshot(self._reader, until_ts=self.position, label=self.label,
                                  buckets=buckets, controllable=False, job=self.focus_job)

    def details(self, what: DetailKind, **kw: Any) -> Details | Comparison:
        with self._reading():
            return details(self._reader, what, until_ts=self.position, **kw)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Counts a read in flight; refused once `stop` has begun."""
        with self._reads:
            if self._closing:
                raise CockpitError("the replay has stopped")
            self._busy += 1
        try:
            yield
        finally:
            with self._reads:
                self._busy -= 1
                self._reads.notify_all()

    def stop(self) -> None:
        """Stop the clock and close the recording once no read is in flight: the app
        quits with a snapshot still being built on its worker thread (a replay playing
        builds four a second), and DuckDB refuses to close a connection in use."""
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        with self._reads:
            self._closing = True
            self._reads.wait_for(lambda: self._busy == 0, timeout=STOP_WAIT_S)
        self._store.close()


def _check_speed(speed: float) -> None:
    if not speed > 0:
        raise ValueError(f"replay speed must be positive, got {speed!r}")
