"""Every key, with the key the user's keymap actually assigns to it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.keys import format_key
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from cockpit.ui.keymap import KEYS, effective_keys

SCOPES = {
    "app": "anywhere", "main": "main screen", "map": "Health pane (GPU map)",
    "host": "host detail",
    "filter": "alerts / log", "alerts": "alerts", "compare": "compare",
    "replay": "replay only",
}


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close")]

    def __init__(self, keymap: dict[str, str]) -> None:
        super().__init__()
        self.keymap = keymap

    def compose(self) -> ComposeResult:
        with Vertical(id="help-dialog"):
            yield Static("[b]Keys[/b]  (remap with a TOML keymap: action = \"key\"; "
                         "ctrl+p opens the command palette)", id="dialog-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("key", "does", "action id", "where")
        keys = effective_keys(self.keymap)
        for spec in KEYS:
            shown = ", ".join(format_key(k) for k in keys[spec.id].split(","))
            table.add_row(shown, spec.description, spec.id, SCOPES[spec.scope], key=spec.id)
        table.focus()
