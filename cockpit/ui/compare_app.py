"""`cockpit compare A B` in the terminal: the compare screen alone, on a comparison read
once from the recordings given (no source streams into it: nothing to follow).

The cockpit's themes and keymap apply as in `cockpit replay`; Esc or `q` quits. The
command palette's Screenshot saves in `screenshot_dir` (`--screenshots`, else the first
side's recording's directory), as the cockpit's does, and says where.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from cockpit.read.compare import Comparison
from cockpit.ui.app_factory import ui_options
from cockpit.ui.screens.compare import CompareScreen
from cockpit.ui.themes import DEFAULT_THEME, ThemeSet


class CompareApp(App):
    TITLE = "cockpit compare"
    BINDINGS = [Binding("q", "quit", "Quit")]

    def __init__(self, comparison: Comparison, theme_set: ThemeSet, theme: str,
                 keymap: dict[str, str] | None = None, screenshot_dir: Path | None = None
                 ) -> None:
        super().__init__(css_path=list(theme_set.css_paths))
        self.comparison = comparison
        self.screenshot_dir = screenshot_dir
        self.keymap = keymap or {}
        for definition in theme_set.themes:
            self.register_theme(definition)
        self.theme = theme
        self.set_keymap(self.keymap)

    def get_default_screen(self) -> Screen:
        return CompareScreen(comparison=self.comparison)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """An SVG of the screen in `screenshot_dir` (else the current directory), never
        Textual's default (the user's Downloads folder, often missing on a server), and a
        toast that says where it went or why it could not."""
        folder = Path(path) if path is not None else self.screenshot_dir or Path.cwd()
        try:
            saved = self.save_screenshot(filename, str(folder), time_format)
        except OSError as exc:
            self.notify(f"screenshot not saved in {folder}: {exc.strerror or exc}",
                        title="Screenshot", severity="error", markup=False)
            return None
        self.notify(f"screenshot saved: {saved}", title="Screenshot", markup=False)
        return saved

    async def action_pop_screen(self) -> None:
        """Esc on the only screen quits, as Back from the cockpit's compare screen
        returns to where the operator came from."""
        if len(self.screen_stack) <= 1:
            self.exit()
        else:
            self.pop_screen()


def make_compare_app(comparison: Comparison, *, theme: str = DEFAULT_THEME,
                     keymap_path: str | Path | None = None,
                     themes_path: str | Path | None = None,
                     screenshot_dir: Path | None = None) -> CompareApp:
    theme_set, keymap = ui_options(theme=theme, keymap_path=keymap_path,
                                   themes_path=themes_path)
    return CompareApp(comparison, theme_set, theme, keymap, screenshot_dir)
