"""Command palette entries: every keyed action and every theme, searchable by name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from cockpit.ui.keymap import KEYS, key_label
from cockpit.ui.replay_actions import is_replayable


class _KeyedApp(Protocol):
    """What the palette needs of the app that lists it (named here, not imported: the
    app imports this provider)."""

    keymap: dict[str, str]
    theme_names: list[str]
    source: object

    def run_keyed_action(self, spec_id: str) -> Awaitable[None]: ...


class CockpitCommands(Provider):
    def _commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        app = cast(_KeyedApp, self.app)  # the one App that lists this provider
        replaying = is_replayable(app.source)
        commands: list[tuple[str, str, Callable[[], object]]] = [
            (spec.description, f"{spec.id} · key {key_label(app.keymap, spec.id)}",
             partial(app.run_keyed_action, spec.id))
            for spec in KEYS
            if replaying or spec.scope != "replay"  # play/seek mean nothing live
        ]
        for name in app.theme_names:
            commands.append((f"Theme: {name}", "switch the colour theme",
                             partial(setattr, app, "theme", name)))
        return commands

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = max(matcher.match(title), matcher.match(help_text))
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)
