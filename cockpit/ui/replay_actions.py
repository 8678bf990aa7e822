"""Replay-only keys: play/pause, speed, seek. Hidden for sources that cannot do them."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from textual import work

from cockpit.read.source import Source
from cockpit.ui.screens.drill_down import DrillDownScreen

if TYPE_CHECKING:  # the mixin's view of the App it is mixed into
    from textual.app import App

    _AppBase = App[Any]
else:
    _AppBase = object

SPEEDS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
REPLAY_METHODS = ("pause", "resume", "set_speed", "seek", "seek_target")
REPLAY_ACTIONS = frozenset({"replay_toggle", "replay_speed", "replay_seek"})
SEEK_SECONDS = 60.0  # recording time per seek press at 1x (see `seek_seconds`)


def seek_seconds(speed: float, span: float) -> float:
    """Recording seconds one seek press moves: more at a higher speed (a minute of
    screen time per press), but never more than a tenth of a recording longer than a
    minute, so a short recording is not crossed in one press."""
    return min(SEEK_SECONDS * max(1.0, speed), max(SEEK_SECONDS, span / 10))


def next_speed(current: float, direction: int) -> float:
    """The next speed on the ladder in `direction`, clamped at both ends."""
    if direction > 0:
        return next((s for s in SPEEDS if s > current + 1e-9), SPEEDS[-1])
    return next((s for s in reversed(SPEEDS) if s < current - 1e-9), SPEEDS[0])


class Replayable(Source, Protocol):
    """A source with a cursor the operator moves (`cockpit.sessions.replay.ReplaySource`):
    what the replay keys need, beyond what every source has."""

    start_ts: float  # the recording's span
    end_ts: float

    @property
    def playing(self) -> bool: ...

    @property
    def speed(self) -> float: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def set_speed(self, speed: float) -> None: ...

    def seek(self, seconds: float) -> None: ...

    def seek_target(self, seconds: float) -> float: ...


def is_replayable(source: object) -> TypeGuard[Replayable]:
    """Whether the replay keys apply: asked of the source's methods, so any source that
    can move its cursor gets them, and the keys stay hidden for every other one."""
    return all(callable(getattr(source, name, None)) for name in REPLAY_METHODS)


class ReplayActions(_AppBase):
    """Mixed into the App, whose `source` it moves and whose label it refreshes."""

    source: Source
    replay_paused: bool = False

    if TYPE_CHECKING:
        def refresh_label(self) -> None: ...  # the App's: the label shows the cursor

    def _replayable(self) -> Replayable | None:
        """The source, when it can replay: the keys are hidden otherwise (`check_action`),
        so None only when one is pressed as the source changes."""
        source = self.source
        return source if is_replayable(source) else None

    @work(thread=True, exclusive=True, exit_on_error=False, group="replay")
    def _replay_call(self, call: Callable[[], None]) -> None:
        """One of the source's replay methods, off the UI thread (it may wait for a read)."""
        call()
        self.call_from_thread(self.refresh_label)

    def action_replay_toggle(self) -> None:
        source = self._replayable()
        if source is None:
            return
        self.replay_paused = source.playing
        self._replay_call(source.pause if self.replay_paused else source.resume)

    def action_replay_speed(self, direction: int) -> None:
        source = self._replayable()
        if source is None:
            return
        speed = next_speed(float(source.speed or 1.0), direction)
        self.notify(f"replay speed {speed:g}x", timeout=2)
        self._replay_call(partial(source.set_speed, speed))

    def action_replay_seek(self, direction: int) -> None:
        """Move the replay cursor by recording seconds (`ReplaySource.seek` is relative)."""
        source = self._replayable()
        if source is None:
            return
        speed = float(source.speed or 1.0)
        seconds = direction * seek_seconds(speed, source.end_ts - source.start_ts)
        screen = self.screen
        if isinstance(screen, DrillDownScreen):
            screen.expect_jump(source.seek_target(seconds))
        self._replay_call(partial(source.seek, seconds))
