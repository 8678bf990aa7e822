"""A one-field input modal whose value is checked before it is accepted.

Used for the LR scale, fork overrides and relaunch exclusions: the parser turns the
text into the value the controller needs or raises `ValueError` with the reason, which
is shown under the field until the input is right.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from cockpit.ui import format as fmt


class PromptScreen(ModalScreen[object]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, help_text: str, parse: Callable[[str], object],
                 value: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.help_text = help_text
        self.parse = parse
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            # Job and host names in these come from the wire: text, never markup.
            yield Static(fmt.markup("[b]$title[/b]", title=self.title_text), id="dialog-title")
            yield Static(fmt.text(self.help_text, multiline=True), id="dialog-body")
            yield Input(value=self.value, id="prompt-input")
            yield Static("", id="prompt-error")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            result = self.parse(event.value)
        except ValueError as exc:
            self.query_one("#prompt-error", Static).update(
                fmt.markup("[$error]$why[/]", why=exc))
            return
        self.dismiss(result)

    def action_cancel(self) -> None:
        self.dismiss(None)
