"""Replay-only keys: play/pause, speed, seek. Hidden for sources that cannot do them."""

from __future__ import annotations

from textual import work

from cockpit.ui.screens.drill_down import DrillDownScreen

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


def is_replayable(source: object) -> bool:
    return all(callable(getattr(source, name, None)) for name in REPLAY_METHODS)


class ReplayActions:
    """Mixed into the App; expects `source`, `snapshot`, `refresh_label`."""

    replay_paused: bool = False

    @work(thread=True, exclusive=True, exit_on_error=False, group="replay")
    def _replay_call(self, method: str, *args: object) -> None:
        getattr(self.source, method)(*args)  # type: ignore[attr-defined]
        self.call_from_thread(self.refresh_label)  # type: ignore[attr-defined]

    def action_replay_toggle(self) -> None:
        playing = getattr(self.source, "playing", None)  # type: ignore[attr-defined]
        self.replay_paused = bool(playing) if playing is not None else not self.replay_paused
        self._replay_call("pause" if self.replay_paused else "resume")

    def action_replay_speed(self, direction: int) -> None:
        current = float(getattr(self.source, "speed", 1.0) or 1.0)  # type: ignore[attr-defined]
        speed = next_speed(current, direction)
        self.notify(f"replay speed {speed:g}x", timeout=2)  # type: ignore[attr-defined]
        self._replay_call("set_speed", speed)

    def action_replay_seek(self, direction: int) -> None:
        """Move the replay cursor by recording seconds (`ReplaySource.seek` is relative)."""
        source = self.source  # type: ignore[attr-defined]
        speed = float(getattr(source, "speed", 1.0) or 1.0)
        seconds = direction * seek_seconds(speed, source.end_ts - source.start_ts)
        screen = self.screen  # type: ignore[attr-defined]
        if isinstance(screen, DrillDownScreen):
            screen.expect_jump(self.source.seek_target(seconds))  # type: ignore[attr-defined]
        self._replay_call("seek", seconds)
