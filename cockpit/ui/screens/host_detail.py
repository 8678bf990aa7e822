"""One host in depth: per-GPU table from the snapshot, history and processes from
`source.details("host", host=NAME)`; `[` / `]` or the tab bar switch hosts."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Static, Tab, Tabs

from cockpit.analysis.gpu_history import xid_label
from cockpit.analysis.gpu_state import gpu_problem, gpus_online
from cockpit.analysis.throttle import throttle_text
from cockpit.snapshot import HostHealth, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui import keymap
from cockpit.ui.screens.drill_down import DrillDownScreen
from cockpit.ui.widgets.detail_view import DetailView, table_cell
from cockpit.ui.widgets.pane import update_text

GPU_COLUMNS = ("gpu", "name", "state", "util", "temp", "power", "memory", "ECC unc",
               "XID", "throttle")


def gpu_rows(host: HostHealth) -> list[tuple[Text, ...]]:
    """The GPU table's cells, as text: a GPU's name comes from the host."""
    rows = []
    for c, online in zip(host.gpus, gpus_online(host), strict=True):
        problem = gpu_problem(c)
        state = "offline" if not online else (problem or "ok")
        if c.simulated:
            state += " (SIM)"
        power = fmt.na(c.power, "{:.0f}") + " / " + fmt.na(c.power_limit, "{:.0f} W")
        memory = f"{fmt.size(c.mem_used)} / {fmt.size(c.mem_total)}"
        rows.append(tuple(map(table_cell, (
            str(c.index), c.name or fmt.NA_TEXT, state, fmt.percent(c.util),
            fmt.na(c.temp, "{:.0f}°C"), power, memory, fmt.na(c.ecc_unc),
            # No XID: "none" where the agent would have seen one, else unknown.
            fmt.na(xid_label(c) or ("none" if c.xid_watched else None)),
            throttle_text(c.throttle)))))
    return rows


def host_summary(host: HostHealth) -> str:
    return (f"link {host.state} · GPUs {host.gpu_state} · CPU {fmt.percent(host.cpu)} · "
            f"RAM {fmt.size(host.mem_used)} / {fmt.size(host.mem_total)} · "
            f"disk {fmt.size(host.disk_used)} / {fmt.size(host.disk_total)} · "
            f"net ↓{fmt.si(host.net_rx, 'B/s')} ↑{fmt.si(host.net_tx, 'B/s')} · "
            f"last seen {fmt.clock(host.last_seen)}")


class HostDetailScreen(DrillDownScreen):
    BINDINGS = [*DrillDownScreen.BINDINGS, *keymap.bindings("host")]
    WHAT = "host"
    # The details scroll with the keyboard (PageDown, End) from the start: the
    # processes, histories and environment are below the first screen at 80x24.
    AUTO_FOCUS = "#host-details"

    def __init__(self, snapshot: Snapshot | None = None, host: str | None = None) -> None:
        super().__init__(snapshot)
        names = self.host_names()
        self.host = host if host in names else (names[0] if names else None)
        self._gpu_rows: list[tuple[Text, ...]] | None = None  # what the GPU table shows
        # Tab ids in order of appearance (a host that appears later may sort anywhere).
        # A tab shows its host's name as text; its id leads back to the name as sent.
        self._tab_ids = {name: f"host-{i}" for i, name in enumerate(names)}

    def host_names(self) -> list[str]:
        return [h.host for h in self.snapshot.health.hosts] if self.snapshot else []

    def details_params(self) -> dict[str, object]:
        return {"host": self.host}

    def request_details(self) -> None:
        if self.host is not None:  # no host yet: nothing to ask about
            super().request_details()

    def compose(self) -> ComposeResult:
        yield Static("[b]Host detail[/b]", id="screen-title")
        yield Tabs(*(Tab(fmt.text(name), id=tab) for name, tab in self._tab_ids.items()))
        yield Static(id="host-summary")
        yield DataTable(id="gpu-table", cursor_type="row", zebra_stripes=True)
        yield DetailView(id="host-details", omit=frozenset({"state", "last_seen"}))
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#gpu-table", DataTable).add_columns(*GPU_COLUMNS)
        if self.host in self._tab_ids:
            self.query_one(Tabs).active = self._tab_ids[self.host]
        super().on_mount()

    def current(self) -> HostHealth | None:
        if self.snapshot is None:
            return None
        return next((h for h in self.snapshot.health.hosts if h.host == self.host), None)

    def show_snapshot(self, snapshot: Snapshot) -> None:
        self._add_new_hosts()
        host = self.current()
        title = fmt.markup("[b]Host detail: $host[/b]", host=self.host or "no hosts")
        update_text(self.query_one("#screen-title", Static), title)
        summary = host_summary(host) if host else "this host is not in the latest snapshot"
        update_text(self.query_one("#host-summary", Static), fmt.text(summary))
        rows = gpu_rows(host) if host else []
        if rows == self._gpu_rows:
            return  # refilling the table would also move its cursor back to the top
        self._gpu_rows = rows
        table = self.query_one("#gpu-table", DataTable)
        table.clear()
        for row in rows:
            table.add_row(*row)

    def _add_new_hosts(self) -> None:
        """Hosts that appeared since the screen opened (the first records of a host whose
        link came up) get their tab; the first one is shown when none was."""
        tabs = self.query_one(Tabs)
        names = self.host_names()
        for name in names:
            if name not in self._tab_ids:
                self._tab_ids[name] = f"host-{len(self._tab_ids)}"
                tabs.add_tab(Tab(fmt.text(name), id=self._tab_ids[name]))
        if self.host is None and names:
            self.host = names[0]
            tabs.active = self._tab_ids[self.host]
            self.request_details()

    def watch_details(self, details: object) -> None:
        if self._ready:
            self.query_one(DetailView).data = details

    def select(self, name: str) -> None:
        if name == self.host:
            return
        self.host = name
        self.query_one(DetailView).data = None
        if self.snapshot is not None:
            self.show_snapshot(self.snapshot)
        self.request_details()

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        if event.tab is not None:
            name = next((n for n, tab in self._tab_ids.items() if tab == event.tab.id), None)
            if name is not None:
                self.select(name)

    def action_cycle_host(self, step: int) -> None:
        names = self.host_names()
        if not names:
            self.notify("No hosts in this snapshot", severity="warning")
            return
        index = names.index(self.host) if self.host in names else 0
        target = (index + step) % len(names)
        self.query_one(Tabs).active = self._tab_ids[names[target]]
