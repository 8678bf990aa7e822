"""Confirmation for destructive job actions, stating exactly what will happen where."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from cockpit.ui import format as fmt


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, description: str) -> None:
        super().__init__()
        self.title_text = title
        self.description = description

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            # Job and host names in these come from the wire: text, never markup.
            yield Static(fmt.markup("[b]$title[/b]", title=self.title_text), id="dialog-title")
            yield Static(fmt.text(self.description, multiline=True), id="dialog-body")
            with Horizontal(id="dialog-buttons"):
                yield Button("Yes, do it (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
