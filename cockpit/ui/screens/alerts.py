"""Alerts (with where and what to try) and the events timeline, filterable with `/`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static

from cockpit.analysis.signal_alerts import acknowledge
from cockpit.analysis.text import counted
from cockpit.snapshot import Alert, EventRow, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui import keymap
from cockpit.ui.screens.filterable import FilterableScreen, matches
from cockpit.ui.widgets.pane import update_text

SEVERITY_STYLE = {"critical": "$error", "warning": "$warning", "info": "$primary"}


@runtime_checkable
class _ShowsSnapshot(Protocol):
    """A screen that shows the newest snapshot (the main screen, a drill-down)."""

    snapshot: Snapshot | None


@runtime_checkable
class _Acknowledging(_ShowsSnapshot, Protocol):
    """The app that keeps the operator's acknowledgements (named here, not imported: the
    app imports this screen)."""

    acknowledged: set[tuple[str, str]]


def alert_text(a: Alert) -> str:
    return f"{a.severity} {a.state} {a.kind} {a.code} {a.where} {a.what} {a.hint}"


def alert_content(a: Alert) -> Content:
    """Every field of an alert may come from an agent: each goes in as text."""
    style = SEVERITY_STYLE.get(a.severity, "$text-muted")
    seen = (f" (last {fmt.clock(a.last_seen)})"
            if a.last_seen is not None and a.last_seen != a.ts else "")
    state = "" if a.state == "active" else " · $state"
    return fmt.markup(f"{fmt.clock(a.ts)}{seen} [{style} b]$severity[/] $kind · $code{state}\n"
                      "   where: $where\n"
                      "   what:  $what\n"
                      "   [$success]try:[/]   $hint",
                      severity=str(a.severity).upper(), kind=a.kind, code=a.code,
                      state=str(a.state).upper(),
                      where=a.where, what=a.what, hint=a.hint)


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
    BINDINGS = [*FilterableScreen.BINDINGS, *keymap.bindings("alerts")]

    def _shown(self) -> list[Alert]:
        snapshot = self.snapshot
        return [a for a in (snapshot.alerts if snapshot else ())
                if matches(alert_text(a), self.query_text)]

    def action_acknowledge(self) -> None:
        """Acknowledge the active alerts shown (all, or those the filter matches): they
        stay listed, marked, and leave the header's count until they clear."""
        fresh = {(a.code, a.where) for a in self._shown() if a.state == "active"}
        app = self.app
        if not fresh or not isinstance(app, _Acknowledging):
            self.notify("no active alert shown to acknowledge", title="Alerts")
            return
        app.acknowledged |= fresh
        snapshot = self.snapshot
        if snapshot is not None:
            app.snapshot = dataclasses.replace(
                snapshot, alerts=acknowledge(snapshot.alerts, app.acknowledged))
            for screen in app.screen_stack:
                if isinstance(screen, _ShowsSnapshot):
                    screen.snapshot = app.snapshot
        self.notify(f"acknowledged {counted(len(fresh), 'alert')}", title="Alerts")

    def compose(self) -> ComposeResult:
        yield Static("[b]Alerts and events[/b]", id="screen-title")
        yield self.filter_input()
        with VerticalScroll(id="alerts-scroll"):
            yield Static(id="alerts-list")
            yield Static("[b]Events timeline[/b]", classes="detail-heading")
            yield Static(id="events-list")
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
        body = Content("\n").join(alert_content(a) for a in alerts)
        update_text(self.query_one("#alerts-list", Static), body or fmt.own_markup(
            "[$success]no alerts[/]" + (" match the filter" if query else "")))
        events = event_rows(self.details, snapshot.events if snapshot else ())
        lines = [event_text(e) for e in sorted(events, key=lambda e: e.ts, reverse=True)]
        lines = [line for line in lines if matches(line, query)]
        update_text(self.query_one("#events-list", Static),
                    Content("\n").join(fmt.text(line) for line in lines) or Content("no events"))
