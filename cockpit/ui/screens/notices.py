"""The notification history (`n`): every toast of this session, newest first, to be
read again after it has gone (`cockpit.ui.notices` keeps them)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from cockpit.analysis.text import counted
from cockpit.ui import format as fmt
from cockpit.ui.notices import Notice, NoticeLog
from cockpit.ui.widgets.pane import update_text

# Textual's toast severities, styled as its toasts are.
SEVERITY = {"information": ("info", "$primary"), "warning": ("warning", "$warning"),
            "error": ("error", "$error")}


def notice_content(notice: Notice) -> Content:
    """One notice: when, how severe, its title, and its message beneath. The title and
    message hold job and host names, an agent's answer or an exception's text: they go
    in as text."""
    word, style = SEVERITY.get(notice.severity, (notice.severity, "$text-muted"))
    repeated = (f" (×{notice.count}, last {fmt.clock(notice.newest_ts)})"
                if notice.count > 1 else "")
    head = fmt.markup(f"{fmt.clock(notice.ts)} [{style} b]$word[/] [b]$title[/]{repeated}",
                      word=word.upper(), title=notice.title or "notice")
    body = [fmt.text(f"   {line}") for line in notice.message.split("\n")]
    return Content("\n").join([head, *body])


def history_content(notices: Iterable[Notice], dropped: int) -> Content:
    shown = [notice_content(n) for n in notices]
    if not shown:
        return fmt.own_markup("[$text-muted]no notifications yet this session[/]")
    if dropped:
        shown.append(fmt.own_markup(
            f"[$text-muted]({counted(dropped, 'older notification')} no longer kept)[/]"))
    return Content("\n\n").join(shown)


class NoticesScreen(ModalScreen[None]):
    """Shown over the screen it was opened from; a notice raised while it is open is
    added to it (`show`)."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Close")]

    def __init__(self, log: NoticeLog) -> None:
        super().__init__()
        self.log_of_notices = log

    def compose(self) -> ComposeResult:
        with Vertical(id="notices-dialog"):
            yield Static(id="notices-title")
            with VerticalScroll(id="notices-scroll"):
                yield Static(id="notices-list")

    def on_mount(self) -> None:
        self.show()
        self.query_one("#notices-scroll").focus()

    def show(self) -> None:
        """Draw the history as it is now: read, so no longer counted as unread."""
        log = self.log_of_notices
        log.read()
        update_text(self.query_one("#notices-title", Static), fmt.own_markup(
            f"[b]Notifications[/b]  {counted(len(log), 'notification')}, newest "
            "first (esc: close)"))
        update_text(self.query_one("#notices-list", Static),
                    history_content(log.newest_first(), log.dropped))
