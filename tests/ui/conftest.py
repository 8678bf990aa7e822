"""Fixtures for the UI tests: a fixed clock and zone (stable screenshots), the replay of
a recorded real run on a clock the test moves, a demo source for edge cases, and a
controller double that records what the cockpit asked of it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cockpit.sessions.replay import ReplaySource
from cockpit.sessions.static_source import StaticSource
from cockpit.ui.demo_static import T0, demo_details, demo_snapshot


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The header clock and every timestamp render the same on every machine."""
    monkeypatch.setattr("cockpit.ui.widgets.status_bar.wall_clock", lambda: T0 + 7)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("textual.widgets.Input.cursor_blink", False, raising=False)


@dataclass(frozen=True)
class FixedSpec:
    elastic: bool = True  # the scale prompt opens (a fixed job's refusal is the real one's)


class RecordingController:
    """Stands where the job-control layer's Controller goes (`cockpit.read.source.
    Controller`, the protocol the screen uses); remembers every call."""

    def __init__(self, job: str = "demo-7b") -> None:
        self.job = job
        self.calls: list[tuple[str, tuple, dict]] = []
        self.forks: dict[str, RecordingController] = {}
        self.hosts: tuple[str, ...] = ()  # the job's hosts are not followed here
        self.spares: tuple[str, ...] = ()
        self.spec = FixedSpec()
        self.last_ops: dict[str, str] = {}  # no agent answers: nothing to follow

    def refresh(self) -> None:
        self.calls.append(("refresh", (), {}))

    def controller_for(self, job: str | None) -> RecordingController | None:
        """As the real one: itself, a fork named as forks are (made on first use), or None."""
        if job is None or job == self.job:
            return self
        if not job.startswith(self.job + "-fork-"):
            return None
        return self.forks.setdefault(job, RecordingController(job))

    def describe(self, action: str, add: str | None = None, remove: str | None = None) -> str:
        self.calls.append(("describe", (action,), {}))
        return f"{action}: signal ranks 0-15 of {self.job} on gpu-node-a, gpu-node-b"

    def _record(self, name: str, *args: object, **kwargs: object) -> str:
        self.calls.append((name, args, kwargs))
        return f"{name} accepted"

    def pause(self) -> str:
        return self._record("pause")

    def resume(self) -> str:
        return self._record("resume")

    def relaunch(self, exclude: tuple[str, ...] = ()) -> str:
        return self._record("relaunch", exclude=exclude)

    def fork(self, overrides: dict[str, object]) -> str:
        return self._record("fork", overrides)

    def adjust(self, **knobs: object) -> str:
        return self._record("adjust", **knobs)

    def checkpoint_now(self) -> str:
        return self._record("checkpoint_now")

    def eval_now(self) -> str:
        return self._record("eval_now")

    def stop(self) -> str:
        return self._record("stop")

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls if name not in ("describe", "refresh")]


class ManualClock:
    """The replay's clock, moved only by the test: what the screen shows then depends on
    the recording and the keys pressed, never on how fast the machine is."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def replay_clock() -> ManualClock:
    return ManualClock()


OpenReplay = Callable[..., ReplaySource]


@pytest.fixture
def recorded_replay(recorded_store: Path, replay_clock: ManualClock) -> Iterator[OpenReplay]:
    """Factory: `recorded_replay(at=1.0)` replays the recorded run from that point of it
    (0.0 start, 1.0 end, which also pauses it; None stays at the start, playing)."""
    sources: list[ReplaySource] = []

    def open_replay(at: float | None = 1.0, speed: float = 10.0) -> ReplaySource:
        source = ReplaySource(recorded_store, speed=speed, clock=replay_clock, tick=0.05)
        sources.append(source)
        if at is not None:
            source.seek_to(at)
        return source

    yield open_replay
    for source in sources:
        source.stop()  # the app stops it on exit; this covers apps that never ran


@pytest.fixture
def demo_source() -> StaticSource:
    return StaticSource(demo_snapshot(), demo_details())


@pytest.fixture
def controller() -> RecordingController:
    return RecordingController()


@pytest.fixture
def controlled_source(controller: RecordingController) -> StaticSource:
    return StaticSource(demo_snapshot(), demo_details(), controller=controller, label="LIVE")
