"""Rate limit for snapshot builds: at most one in flight, at most `rate` per second.

The decision is kept apart from Textual so it can be reasoned about (and tested) on its
own: the app asks the gate what to do when data arrives and when a build finishes, and
schedules a one-shot timer when told to wait. A flood of data notices therefore costs
one build per interval, and a slow build can never overlap the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

BUILD_NOW = "build"
WAIT = "wait"
IDLE = "idle"


@dataclass
class RefreshGate:
    min_interval: float = 0.25  # 4 builds per second at most
    in_flight: bool = False
    dirty: bool = False
    timer_pending: bool = False
    last_start: float | None = None

    def request(self, now: float) -> tuple[str, float]:
        """New data arrived at `now`: build now, wait the returned seconds, or do nothing."""
        self.dirty = True
        if self.in_flight or self.timer_pending:
            return IDLE, 0.0
        wait = self._remaining(now)
        if wait > 0:
            self.timer_pending = True
            return WAIT, wait
        return self._start(now)

    def timer_fired(self, now: float) -> tuple[str, float]:
        self.timer_pending = False
        if not self.dirty or self.in_flight:
            return IDLE, 0.0
        return self.request(now)

    def finished(self, now: float) -> tuple[str, float]:
        """The build ended (either way); start another if data came in meanwhile."""
        self.in_flight = False
        if self.dirty and not self.timer_pending:
            return self.request(now)
        return IDLE, 0.0

    def _remaining(self, now: float) -> float:
        if self.last_start is None:
            return 0.0
        return max(0.0, self.last_start + self.min_interval - now)

    def _start(self, now: float) -> tuple[str, float]:
        self.dirty = False
        self.in_flight = True
        self.last_start = now
        return BUILD_NOW, 0.0
