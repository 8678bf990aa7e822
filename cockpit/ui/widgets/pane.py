"""Base class of the four instruments on the main screen.

A pane receives the whole `Snapshot` through its `snapshot` reactive and redraws its
own children from it; it never looks at siblings or at the source. Each pane also
answers a one-line summary, which is all that is shown of it on a narrow terminal.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from cockpit.snapshot import Snapshot
from cockpit.ui import format as fmt


def update_text(widget: Static, content: Content) -> None:
    """Set a Static's content only when it changed, and ask for a layout pass only when
    the new text needs a different height.

    Content, not a markup string: what a line holds from the wire goes in as text
    (`fmt.text`, `fmt.markup`), so nothing in it is parsed as markup.

    Most lines read the same from one refresh to the next, and those that change (the
    time since the last step, the step count) keep their height: a layout pass makes
    the screen arrange and repaint every widget, where a repaint redraws the one line.
    A widget with no width is not on screen (hidden, or not laid out yet): whatever
    shows it again lays it out.
    """
    shown = widget.content
    if isinstance(shown, Content) and shown.is_same(content):
        return
    size = widget.content_size
    widget.update(content, layout=False)
    if size.width and widget.get_content_height(size, size, size.width) != size.height:
        widget.refresh(layout=True)


class Pane(Vertical, can_focus=True):
    """A focusable, maximisable instrument with a title, a body and a summary line."""

    ALLOW_MAXIMIZE = True
    TITLE = ""
    NUMBER = 0

    # A pane draws only its border: its children repaint what the snapshot changed.
    snapshot: reactive[Snapshot | None] = reactive(None, repaint=False)
    _ready = False  # children composed and mounted: safe to query

    def compose(self) -> ComposeResult:
        yield Static("", classes="summary", markup=True)
        with Vertical(classes="body"):
            yield from self.compose_body()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self._ready = True
        self.border_title = f"{self.NUMBER} {self.TITLE}"
        self.query_one(".summary", Static).update(f"[b]{self.NUMBER} {self.TITLE}[/b]  n/a")
        self.watch_snapshot(self.snapshot)

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None or not self._ready:
            return
        title = fmt.own_markup(f"[b]{self.NUMBER} {self.TITLE}[/b]  ")
        update_text(self.query_one(".summary", Static), title + self.summary(snapshot))
        self.show(snapshot)

    def show(self, snapshot: Snapshot) -> None:
        """Update the body from a new snapshot."""

    def summary(self, snapshot: Snapshot) -> Content:
        """One line: the pane at a glance."""
        return Content("")
