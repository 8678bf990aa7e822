"""Alerts (with where and what to try) and the events timeline, filterable with `/`."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import Footer, Static

from cockpit.snapshot import Alert, EventRow, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.screens.filterable import FilterableScreen, matches
from cockpit.ui.widgets.pane import update_text

SEVERITY_STYLE = {"critical": "$error", "warning": "$warning", "info": "$primary"}


def alert_text(a: Alert) -> str:
    return f"{a.severity} {a.kind} {a.code} {a.where} {a.what} {a.hint}"


def alert_markup(a: Alert) -> str:
    style = SEVERITY_STYLE.get(a.severity, "$text-muted")
    return (f"{fmt.clock(a.ts)} [{style} b]{escape(a.severity.upper())}[/] "
            f"{escape(a.kind)} · {escape(a.code)}\n"
            f"   where: {escape(a.where)}\n"
            f"   what:  {escape(a.what)}\n"
            f"   [$success]try:[/]   {escape(a.hint)}")


def event_text(e: EventRow) -> str:
    step = f" step {e.step:,}" if e.step is not None else ""
    times = f" (×{e.count})" if e.count > 1 else ""
    return f"{fmt.clock(e.ts)} {e.host} {e.kind}{step}: {e.msg}{times}"


def event_rows(details: object, fallback: tuple[EventRow, ...]) -> list[EventRow]:
    """The longer timeline from `details("events")` when the source gives one, else the
    recent events carried in the snapshot."""
    rows = getattr(details, "events", details)
    if isinstance(rows, Iterable) and not isinstance(rows, (str, bytes)):
        found = [r for r in rows if hasattr(r, "ts") and hasattr(r, "msg")]
        if found:
            return found
    return list(fallback)


class AlertsScreen(FilterableScreen):
    WHAT = "events"
    AUTO_FOCUS = "#alerts-scroll"

    def compose(self) -> ComposeResult:
        yield Static("[b]Alerts and events[/b]", id="screen-title")
        yield self.filter_input()
        with VerticalScroll(id="alerts-scroll"):
            yield Static(id="alerts-list")
            yield Static("[b]Events timeline[/b]", classes="detail-heading")
            yield Static(id="events-list", markup=False)
        yield Footer()

    def show_snapshot(self, snapshot: Snapshot) -> None:
        self.apply_filter()

    def watch_details(self, details: object) -> None:
        if self._ready:
            self.apply_filter()

    def apply_filter(self) -> None:
        snapshot = self.snapshot
        query = self.query_text
        alerts = [a for a in (snapshot.alerts if snapshot else ()) if matches(alert_text(a), query)]
        alerts.sort(key=lambda a: a.ts, reverse=True)
        body = "\n".join(alert_markup(a) for a in alerts)
        update_text(self.query_one("#alerts-list", Static),
                    body or "[$success]no alerts[/]" + (" match the filter" if query else ""))
        events = event_rows(self.details, snapshot.events if snapshot else ())
        lines = [event_text(e) for e in sorted(events, key=lambda e: e.ts, reverse=True)]
        lines = [line for line in lines if matches(line, query)]
        update_text(self.query_one("#events-list", Static), "\n".join(lines) or "no events")
