"""Fixtures for the UI tests: a fixed clock and zone (stable screenshots), a demo
source, and a controller double that records what the cockpit asked of it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cockpit.ui.demo_static import T0, demo_details, demo_snapshot
from cockpit.ui.static_source import StaticSource


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


class RecordingController:
    """Stands where the job-control layer's Controller goes; remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def describe(self, action: str) -> str:
        self.calls.append(("describe", (action,), {}))
        return f"{action}: signal ranks 0-15 on gpu-node-a, gpu-node-b"

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

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls if name != "describe"]


class RecordingReplaySource(StaticSource):
    """A static source with the replay controls, recording how they were driven."""

    def __init__(self) -> None:
        super().__init__(demo_snapshot(label="REPLAY 10x"), demo_details())
        self.speed = 10.0
        self.playing = True
        self.replay_calls: list[tuple[str, tuple]] = []

    @property  # type: ignore[override]
    def label(self) -> str:
        return f"REPLAY {self.speed:g}x" + ("" if self.playing else " PAUSED")

    @label.setter
    def label(self, value: str) -> None:
        pass

    def pause(self) -> None:
        self.playing = False
        self.replay_calls.append(("pause", ()))

    def resume(self) -> None:
        self.playing = True
        self.replay_calls.append(("resume", ()))

    def set_speed(self, speed: float) -> None:
        self.speed = speed
        self.replay_calls.append(("set_speed", (speed,)))

    def seek(self, seconds: float) -> None:
        self.replay_calls.append(("seek", (seconds,)))


@pytest.fixture
def demo_source() -> StaticSource:
    return StaticSource(demo_snapshot(), demo_details())


@pytest.fixture
def controller() -> RecordingController:
    return RecordingController()


@pytest.fixture
def controlled_source(controller: RecordingController) -> StaticSource:
    return StaticSource(demo_snapshot(), demo_details(), controller=controller, label="LIVE")


@pytest.fixture
def replay_source() -> RecordingReplaySource:
    return RecordingReplaySource()
