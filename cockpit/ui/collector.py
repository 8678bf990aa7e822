"""Keeps Python's cyclic garbage collector out of a screen refresh.

A refresh allocates thousands of objects (a fleet's GPU cells, the rows read, the
strips painted), and every so many allocations the collector runs; its full passes walk
every object alive that `gc.freeze` did not set aside (the reader's kept answers, the
last snapshot) and took 20 to 30 ms, always in the middle of some refresh. While a
refresh is built and painted the collector waits; it runs as soon as the paint is done,
before the next one. The garbage is the same and so is the collector's work: only when it
happens changes, between frames rather than inside one.

A hold ends `RELEASE_AFTER_S` after the paint, when the refresh fails or is cancelled,
or when the app stops; the delay because a new snapshot is painted in waves (the panes'
text first, then what its new size lays out again), and a release right after the first
wave ran the collector in the middle of the refresh all the same. The refresh gate
leaves at least a quarter of a second between refreshes, so the collector still runs
between them; it is never taken when something else has turned the collector off. Each
refresh's hold has a generation: the release a refresh schedules for after its paint
runs on the event loop, and where the next refresh has already begun (a replay played
fast, refreshes back to back) it would turn the collector on in the middle of that one.
Such a release is skipped, and the newer refresh's paint releases the hold, unless
`MAX_CARRIED` refreshes in a row have carried it over: then the collector runs anyway,
so that a screen that never rests still collects.
"""

from __future__ import annotations

import gc
import threading

MAX_CARRIED = 8
RELEASE_AFTER_S = 0.1  # after a refresh's first paint: its later waves are done by then


class CollectorHold:
    """One refresh's hold on the collector (the refresh worker takes it on its thread,
    the app releases it on its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False
        self._generation = 0  # refreshes begun
        self._carried = 0  # refreshes begun while the hold was still on

    @property
    def held(self) -> bool:
        return self._held

    @property
    def generation(self) -> int:
        """The newest refresh's generation (`hold`)."""
        return self._generation

    def hold(self, *, renew: bool = True) -> int:
        """Hold the collector for a refresh; `renew`: a refresh begins (a new
        generation), else the current one's hold is taken again. Returns the
        generation."""
        with self._lock:
            if renew:
                self._generation += 1
                if self._held:
                    self._carried += 1
            if not self._held and gc.isenabled():
                gc.disable()
                self._held = True
                self._carried = 0
            return self._generation

    def release(self, generation: int | None = None) -> None:
        """Turn the collector on again; `generation`: the refresh whose paint is done,
        skipped when a newer refresh holds the collector (see the module's text)."""
        with self._lock:
            if not self._held:
                return
            if (generation is not None and generation != self._generation
                    and self._carried < MAX_CARRIED):
                return
            self._held = False
            gc.enable()
