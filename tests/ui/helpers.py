"""Small Pilot helpers shared by the UI tests."""

from __future__ import annotations

from textual.app import App
from textual.pilot import Pilot


async def settle(pilot: Pilot, rounds: int = 3) -> None:
    """Let workers finish and the messages they post be handled (details need two hops)."""
    for _ in range(rounds):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


def text(app: App, selector: str) -> str:
    """Plain text a widget shows right now."""
    return str(app.screen.query_one(selector).render())


def notifications(app: App) -> list[str]:
    return [n.message for n in app._notifications]
