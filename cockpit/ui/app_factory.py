"""`make_app`: the one way to build the cockpit app, for the CLI and for tests.

Themes and keymap are validated here, before the app exists, so a bad file is reported
as a clear error (`ThemeError`, `KeymapError`) instead of failing inside Textual.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import BUILTIN_THEMES

from cockpit.read.source import Source
from cockpit.ui.app import CockpitApp
from cockpit.ui.keymap import load_keymap
from cockpit.ui.themes import DEFAULT_THEME, ThemeError, ThemeSet, load_themes


def ui_options(*, theme: str = DEFAULT_THEME, keymap_path: str | Path | None = None,
               themes_path: str | Path | None = None) -> tuple[ThemeSet, dict[str, str]]:
    """The themes and keymap, checked: the CLI asks before it starts a demo or connects
    to hosts, so a mistyped option costs nothing to fix."""
    theme_set = load_themes(Path(themes_path) if themes_path else None)
    if theme not in theme_set.names() and theme not in BUILTIN_THEMES:
        raise ThemeError(f"unknown theme {theme!r}; choose one of: "
                         f"{', '.join(theme_set.names())} (or a Textual built-in theme)")
    keymap = load_keymap(keymap_path) if keymap_path else {}
    return theme_set, keymap


def make_app(source: Source, *, theme: str = DEFAULT_THEME,
             keymap_path: str | Path | None = None,
             themes_path: str | Path | None = None,
             screenshot_dir: Path | None = None) -> CockpitApp:
    theme_set, keymap = ui_options(theme=theme, keymap_path=keymap_path,
                                   themes_path=themes_path)
    return CockpitApp(source, theme_set, theme, keymap, screenshot_dir=screenshot_dir)
