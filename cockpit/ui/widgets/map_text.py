"""The GPU map's text: the fleet's hosts worst first (`fleet_view`), and the map drawn
for the room it has (`draw`) in the densest form that fits: a line per host (with each
GPU's figures under it where lines are to spare), a cell per GPU, or a cell per host.

Pure text building, no widget: `gpu_map.GpuMap` draws it and keeps its lines' cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from operator import attrgetter

from textual.content import Content
from textual.geometry import Size

from cockpit.analysis import gpu_state as gs
from cockpit.analysis.gpu_state import GpuState, Level
from cockpit.analysis.text import counted
from cockpit.snapshot import HostHealth
from cockpit.ui import format as fmt
from cockpit.ui.widgets.gpu_grid import FIGURES, LEVEL_STYLE, gpu_figures, host_line

CURSOR = "reverse"
MUTED = "$text-muted"
# Hosts per group of the per-host map: a space between groups helps counting, and ten
# (not a host's eight GPUs) keeps it from reading as the per-GPU map.
GROUP = 10
# Lines around the map: legend, counts, resources, the cursor's host.
FRAME_LINES = 4
RESOURCE_NAMES = {"cpu": "CPU", "mem": "RAM", "disk": "disk"}


# Each state's style, by its rank: a map draws a style per run of cells, and looking an
# enum up in a dict hashes it in Python (a thousand GPUs: a good part of a redraw).
_STATE_STYLES = {s.rank: LEVEL_STYLE[s.level] for s in GpuState}


def state_style(state: GpuState) -> str:
    return _STATE_STYLES[state.rank]


@dataclass(frozen=True)
class HostRow:
    """One host as the map shows it, computed once per snapshot.

    Its cause and labels are worked out when first asked for: the map shows one host's
    cause (the cursor's) and a filter typed asks for labels, while a fleet's snapshot
    makes a row for each of its hundred-odd hosts."""

    host: HostHealth
    state: GpuState  # its worst GPU, or its link's state
    states: tuple[GpuState, ...]  # each GPU's
    sort_key: tuple[int, int, str]  # `gpu_state.sort_key`: worst first

    @property
    def name(self) -> str:
        return self.host.host

    @cached_property
    def cause(self) -> str:
        """Why it is in `state`, in words."""
        return gs.host_cause(self.host, self.states, self.state)

    @cached_property
    def labels(self) -> frozenset[str]:
        """The states it shows, for the filter."""
        return frozenset({self.state.label.lower(), self.state.level.value,
                          *(s.label.lower() for s in self.states)})


@dataclass(frozen=True)
class FleetView:
    """The hosts worst first, with the counts the legend shows."""

    rows: tuple[HostRow, ...] = ()
    counts: tuple[tuple[GpuState, int], ...] = ()  # GPUs by state, worst first, non-zero
    gpus: int = 0
    # The fleet's CPU, RAM, disk and network line (all hosts, whatever the filter).
    resources: Content = field(default_factory=Content)


def host_row(host: HostHealth) -> HostRow:
    states = gs.gpu_states(host)
    state = gs.host_state(host, states)
    return HostRow(host, state, states, gs.sort_key(host, states, state))


def fleet_view(hosts: tuple[HostHealth, ...]) -> FleetView:
    rows = sorted(map(host_row, hosts), key=attrgetter("sort_key"))
    tally = dict.fromkeys((s.rank for s in GpuState), 0)  # GPUs per state, by its rank
    for row in rows:
        for state in row.states:
            tally[state.rank] += 1
    ordered = tuple(rows)
    resources = Content.assemble(*_resources(ordered, gs.busiest_net_rate(hosts)))
    counts = {s: tally[s.rank] for s in GpuState}  # in the enum's order, as before
    return FleetView(ordered, tuple((s, n) for s, n in counts.items() if n),
                     sum(len(r.states) for r in rows), resources)


def matches(row: HostRow, query: str) -> bool:
    """Every word of `query` is part of the host's name or names one of its states
    ("xid", "offline", "error"...), in any case."""
    name = row.name.lower()
    return all(word in name or any(label.startswith(word) for label in row.labels)
               for word in query.lower().split())


# Drawing -------------------------------------------------------------------------------

Piece = tuple[str, str] | str


@dataclass
class Drawing:
    """The map's text and where each host's cells are, for clicks and scrolling."""

    content: Content
    mode: str  # "list", "gpus" or "hosts"
    hits: dict[int, list[tuple[int, int, str]]]  # line -> (from x, to x, host)
    cursor_line: int | None = None
    height: int = 1  # lines
    lines: tuple[Content, ...] = ()  # `content`'s lines, each drawn on its own


def _legend() -> list[Piece]:
    parts: list[Piece] = []
    for state in GpuState:
        parts += [(state.glyph, state_style(state)), f" {state.label}  "]
    return parts


LEGEND = Content.assemble(*_legend())


def _counts(view: FleetView, shown: int, query: str, mode: str) -> list[Piece]:
    parts: list[Piece] = [f"{counted(len(view.rows), 'host')} · "
                          f"{counted(view.gpus, 'GPU')}:"]
    for state, n in view.counts:
        parts += [" ", (f"{state.glyph}{n:,}", state_style(state))]
    if query:
        parts.append(" · filter ")
        parts.append((fmt.printable(query), "bold"))
        parts.append(f": {shown} shown")
    if mode == "hosts":
        parts.append(" · a cell per host (its worst GPU)")
    return parts


def _resources(rows: tuple[HostRow, ...], busiest_net: float | None) -> list[Piece]:
    """CPU, RAM and disk: the fullest host's share, and how many hosts are high or full
    (the fullest named then); the network: the busiest host's rates."""
    # The fractions alone (no `Usage` per host and resource): only the fullest host's
    # is graded unless it is high, which a well fleet's never is.
    fractions = [(row, gs.fill_fractions(row.host)) for row in rows]
    parts: list[Piece] = []
    for i, key in enumerate(gs.FILLED):
        label = RESOURCE_NAMES[key]
        known = [(row, f[i]) for row, f in fractions if f[i] is not None]
        if not known:
            parts += [(f"{label} n/a", MUTED), " · "]
            continue
        row, top = max(known, key=lambda item: item[1] or 0.0)
        share = f"{100 * (top or 0):.0f}%"
        if gs.fill_level(top, key) is Level.OK:
            parts += [f"{label} ", ("ok", LEVEL_STYLE[Level.OK]), f" ≤{share} · "]
            continue
        parts.append(f"{label}")
        levels = [gs.fill_level(fraction, key) for _, fraction in known]
        for level, word in ((Level.ERROR, "full"), (Level.WARNING, "high")):
            n = levels.count(level)
            if n:
                parts += [" ", (f"{n} {word}", LEVEL_STYLE[level])]
        parts.append(f" (max {fmt.printable(row.name)} {share}) · ")
    busiest = max(rows, key=lambda r: gs.net_rate(r.host) or -1.0, default=None)
    if busiest is None or gs.net_rate(busiest.host) is None:
        parts.append(("net n/a", MUTED))
    else:
        h = busiest.host
        parts.append(f"net max ↓{fmt.si(h.net_rx, 'B/s')} ↑{fmt.si(h.net_tx, 'B/s')}")
    return parts


def _cursor_line(row: HostRow | None) -> list[Piece]:
    if row is None:
        return [("no host matches the filter", MUTED)]
    h = row.host
    return ["▶ ", (fmt.printable(h.host), "bold"), " ",
            (f"{row.state.glyph} {fmt.printable(row.cause)}", state_style(row.state)),
            "" if row.cause == h.state else f" · {fmt.printable(h.state)}",
            f" · CPU {fmt.percent(h.cpu)}"
            f" RAM {fmt.percent(fmt.ratio(h.mem_used, h.mem_total))}"
            f" disk {fmt.percent(fmt.ratio(h.disk_used, h.disk_total))}"
            f" net ↓{fmt.si(h.net_rx)} ↑{fmt.si(h.net_tx)}"]


@lru_cache(maxsize=1024)
def _cells(states: tuple[GpuState, ...], width: int, cursor: bool) -> tuple[Piece, ...]:
    """A host's GPU cells, runs of one state in one piece, padded to `width`.

    Remembered: a fleet's hosts show a handful of state patterns (most hosts all OK),
    and a refresh draws 128 hosts of them."""
    extra = f" {CURSOR}" if cursor else ""
    parts: list[Piece] = []
    run: list[GpuState] = []
    for state in states:
        if run and state is not run[0]:
            parts.append(("".join(s.glyph for s in run), state_style(run[0]) + extra))
            run = []
        run.append(state)
    if run:
        parts.append(("".join(s.glyph for s in run), state_style(run[0]) + extra))
    if not states:
        parts.append(("-", MUTED + extra))
    pad = width - max(1, len(states))
    if pad > 0:
        parts.append(" " * pad)
    return tuple(parts)


def choose_mode(view_rows: int, gpus_per_host: int, room: Size) -> str:
    """The most detailed form that fits the room: a line per host, a cell per GPU, or a
    cell per host (which is used, scrolling, where nothing fits)."""
    if view_rows + FRAME_LINES <= room.height:
        return "list"
    per_row = max(1, (room.width + 1) // (gpus_per_host + 1))
    if -(-view_rows // per_row) + FRAME_LINES <= room.height:
        return "gpus"
    return "hosts"


def figure_lines(hosts: int, room: Size, reserve: int) -> int:
    """How many of `FIGURES` each host's GPUs show under its line: what `room` leaves
    after the hosts' lines, the map's frame and the `reserve` (lines the pane keeps
    under the map), shared by the hosts, less a header line; 0 where not even one fits."""
    if not hosts:
        return 0
    spare = (room.height - reserve - FRAME_LINES - hosts) // hosts
    return 0 if spare < 2 else min(len(FIGURES), spare - 1)


def draw(view: FleetView, rows: tuple[HostRow, ...], room: Size, cursor: str | None,
         query: str, reserve: int = 0) -> Drawing:
    """The map for `rows` (the filtered hosts of `view`) in `room` (the space the pane
    gives it, `reserve` lines of it kept for what follows the map), the `cursor` host
    highlighted."""
    width = max(room.width, 10)
    gpus_per_host = max((len(r.states) for r in rows), default=1) or 1
    mode = choose_mode(len(rows), gpus_per_host, room)
    lines: list[Content] = [LEGEND,
                            Content.assemble(*_counts(view, len(rows), query, mode))]
    hits: dict[int, list[tuple[int, int, str]]] = {}
    cursor_line = None
    if mode == "list":
        name_width = min(16, max((len(fmt.printable(r.name)) for r in rows), default=1))
        figures = figure_lines(len(rows), room, reserve)
        for row in rows:
            mark = "▶ " if row.name == cursor else "  "
            hits[len(lines)] = [(0, width, row.name)]
            if row.name == cursor:
                cursor_line = len(lines)
            lines.append(Content(mark) + host_line(row.host, name_width, row.states))
            for line in gpu_figures(row.host, row.states, figures):
                hits[len(lines)] = [(0, width, row.name)]
                lines.append(line)
    else:
        block = gpus_per_host if mode == "gpus" else 1
        per_row = max(1, (width + 1) // (block + 1)) if mode == "gpus" else max(
            GROUP, (width + 1) // (GROUP + 1) * GROUP)
        for start in range(0, len(rows), per_row):
            parts: list[Piece] = []
            spans: list[tuple[int, int, str]] = []
            x = 0
            for i, row in enumerate(rows[start:start + per_row]):
                gap = " " if mode == "gpus" and i else (
                    " " if mode == "hosts" and i and i % GROUP == 0 else "")
                if gap:
                    parts.append(gap)
                    x += 1
                here = row.name == cursor
                if here:
                    cursor_line = len(lines)
                states = row.states if mode == "gpus" else (row.state,)
                parts += _cells(states, block, here)
                spans.append((x, x + block, row.name))
                x += block
            hits[len(lines)] = spans
            lines.append(Content.assemble(*parts))
    lines.append(view.resources)
    current = next((r for r in rows if r.name == cursor), None)
    lines.append(Content.assemble(*_cursor_line(current)))
    if not view.rows:
        lines = [Content.assemble(("no hosts reported yet", MUTED))]
        hits = {}
    return Drawing(Content("\n").join(lines), mode, hits, cursor_line, len(lines),
                   tuple(lines))
