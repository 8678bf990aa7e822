"""Keeps Python's cyclic garbage collector out of a screen refresh.

A refresh allocates thousands of objects (a fleet's GPU cells, the rows read, the
strips painted), and every so many allocations the collector runs; its full passes walk
every object alive that `gc.freeze` did not set aside (the reader's kept answers, the
last snapshot) and took 20 to 30 ms, always in the middle of some refresh. While a
refresh is built and painted the collector waits; it runs as soon as the paint is done,
before the next one. The garbage is the same and so is the collector's work: only when it
happens changes, between frames rather than inside one.

A hold ends when the paint is done, when the refresh fails or is cancelled, or when the
app stops; it is never taken when something else has turned the collector off.
"""

from __future__ import annotations

import gc
import threading


class CollectorHold:
    """One refresh's hold on the collector (the refresh worker takes it on its thread,
    the app releases it on its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False

    @property
    def held(self) -> bool:
        return self._held

    def hold(self) -> None:
        with self._lock:
            if not self._held and gc.isenabled():
                gc.disable()
                self._held = True

    def release(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                gc.enable()
