"""The tail of the job's output, from every host, filterable with `/`."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.widgets import Footer, Log, Static

from cockpit.analysis.text import printable
from cockpit.ui import format as fmt
from cockpit.ui.screens.filterable import FilterableScreen, matches


def log_lines(details: object) -> list[str]:
    """Text lines from whatever the source returns: a string, lines, or log records
    with a host/rank/stream prefix and a `line` (or `text`, `msg`) field. Each as
    `printable` shows it: a trainer's colour codes or an escape sequence in its output
    read as text (`␛[31m`), and never reach the terminal."""
    return [printable(line) for line in _raw_lines(details)]


def _raw_lines(details: object) -> list[str]:
    if details is None:
        return []
    if isinstance(details, str):
        return details.splitlines()
    rows = getattr(details, "lines", details)
    if isinstance(rows, str):
        return rows.splitlines()
    if not isinstance(rows, Iterable):
        return [str(rows)]
    out = []
    for row in rows:
        if isinstance(row, str):
            out.append(row)
            continue
        text = next((getattr(row, k) for k in ("line", "text", "msg") if hasattr(row, k)), row)
        prefix = [fmt.clock(row.ts)] if getattr(row, "ts", None) is not None else []
        prefix += [str(getattr(row, k)) for k in ("host", "rank", "stream")
                   if getattr(row, k, None) is not None]
        out.append(" ".join([*prefix, str(text)]))
    return out


class LogTailScreen(FilterableScreen):
    WHAT = "log"
    AUTO_FOCUS = "#log-view"
    _shown: list[str] | None = None  # the lines the log view holds

    def compose(self) -> ComposeResult:
        yield Static("[b]Job log (tail)[/b]", id="screen-title")
        yield self.filter_input()
        yield Log(id="log-view", auto_scroll=True)
        yield Footer()

    def watch_details(self, details: object) -> None:
        if self._ready:
            self.apply_filter()

    def apply_filter(self) -> None:
        query = self.query_text
        lines = [line for line in log_lines(self.details) if matches(line, query)]
        lines = lines or ["(no log lines" + (" match the filter)" if query else ")")]
        if lines == self._shown:
            return  # the tail is re-fetched every few seconds; rewriting it would scroll
        self._shown = lines
        view = self.query_one(Log)
        # A reader at the newest line follows the tail; one who scrolled up to read keeps
        # the place. (Log's own auto-scroll cannot tell after `clear`, which empties the
        # view without moving its scroll offset.)
        following = view.line_count == 0 or view.is_vertical_scroll_end
        view.clear()
        view.write_lines(lines, scroll_end=False)
        if following:
            view.scroll_end(animate=False, immediate=True, x_axis=False)
