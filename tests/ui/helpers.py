"""Small Pilot helpers shared by the UI tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.pilot import Pilot

# Every notification the app raised since the test last cleared them, its toast timed
# out or not (`tests/harness/toasts.py`).
from tests.harness.toasts import kept as notified


async def settle(pilot: Pilot, rounds: int = 3) -> None:
    """Let workers finish and the messages they post be handled (details need two hops)."""
    for _ in range(rounds):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


async def answer(pilot: Pilot, *steps: str | tuple[str, ...]) -> None:
    """Each step (a key, or keys typed in one go) pressed, then the app settled: what an
    operator does at a dialog, one answer at a time."""
    for step in steps:
        await pilot.press(*((step,) if isinstance(step, str) else step))
        await settle(pilot)


def text(app: App, selector: str) -> str:
    """Plain text a widget shows right now."""
    return str(app.screen.query_one(selector).render())


def notifications(app: App) -> list[str]:
    """The messages of `notified`."""
    return [n.message for n in notified(app)]


async def wait_until(pilot: Pilot, condition: Callable[[], bool], what: str,
                     limit_s: float = 45.0) -> None:
    """Pump the app until `condition` holds: the replay clock thread and the refresh gate
    deliver on their own schedule. `limit_s` only bounds a hang; it is not a threshold."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            # What the app said meanwhile (a snapshot that failed to build says so here).
            said = "; ".join(notifications(pilot.app)[-5:]) or "nothing"
            raise AssertionError(f"gave up waiting for {what}; the app's last notices: {said}")
        await pilot.pause(0.05)


async def show(pilot: Pilot, source: Any, snapshot: Any) -> None:
    """Hand `snapshot` to a `StaticSource` and wait until the app shows it: the refresh
    gate builds at most four per second, so a second change within 250 ms waits on a
    timer that `settle` alone does not wait for."""
    source.set_snapshot(snapshot)
    await wait_until(pilot, lambda: getattr(pilot.app, "snapshot", None) is snapshot,
                     "the new snapshot on screen")
    await settle(pilot)
