"""The fleet's GPUs at a glance: one cell per GPU, grouped by host, worst hosts first.

A cell's colour is its state's level and its glyph the state itself (● ok, · idle,
▲ hot, ▼ throttled, ? stale, ◆ ECC, ✖ XID, ○ offline), so the map reads the same in
every theme and without colour; the verdicts are `cockpit.analysis.gpu_state`'s. The
map picks the densest form the room needs: one line per host (a few hosts, with their
figures), one cell per GPU (blocks of a host's GPUs), or, where even that does not fit
(80 × 24 with 128 hosts), one cell per host in its worst GPU's state. Host CPU, memory,
disk and network follow on one line: the fullest host's share, and how many hosts are
high or full (the fullest named); the line under it is the cursor's host in words.

The whole map is one widget drawing one `Content`, rebuilt once per snapshot, filter,
cursor move or change of room: no widget per cell, so a 1,024-GPU refresh costs one
pass over the hosts. Turning that text into screen cells costs more than building it
(a style per run of cells), and from one snapshot to the next most lines of the map
read the same (GPUs change state far less often than their figures change): each line
is turned into cells once and kept while its text and styles, the width and the
theme stay the same, and only the lines that changed are painted again. The cursor (a
host) survives new snapshots by name; the pane moves it, filters the map and opens the
host it is on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from operator import attrgetter
from typing import Any

from textual import events
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

from cockpit.analysis import gpu_state as gs
from cockpit.analysis.gpu_state import GpuState, Level
from cockpit.analysis.text import counted
from cockpit.snapshot import HostHealth
from cockpit.ui import format as fmt
from cockpit.ui.widgets.gpu_grid import LEVEL_STYLE, host_line

CURSOR = "reverse"
MUTED = "$text-muted"
# Hosts per group of the per-host map: a space between groups helps counting, and ten
# (not a host's eight GPUs) keeps it from reading as the per-GPU map.
GROUP = 10
# Lines around the map: legend, counts, resources, the cursor's host.
FRAME_LINES = 4
# Map lines whose cells are kept (`GpuMap.render_line`): more than a screen's worth, so
# that a line that comes back after a few snapshots (a host's state flapping) is found.
STRIPS_KEPT = 1024
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
        if gs.fill_level(top) is Level.OK:
            parts += [f"{label} ", ("ok", LEVEL_STYLE[Level.OK]), f" ≤{share} · "]
            continue
        parts.append(f"{label}")
        levels = [gs.fill_level(fraction) for _, fraction in known]
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


def draw(view: FleetView, rows: tuple[HostRow, ...], room: Size, cursor: str | None,
         query: str) -> Drawing:
    """The map for `rows` (the filtered hosts of `view`) in `room` (the space the pane
    gives it), the `cursor` host highlighted."""
    width = max(room.width, 10)
    gpus_per_host = max((len(r.states) for r in rows), default=1) or 1
    mode = choose_mode(len(rows), gpus_per_host, room)
    lines: list[Content] = [LEGEND,
                            Content.assemble(*_counts(view, len(rows), query, mode))]
    hits: dict[int, list[tuple[int, int, str]]] = {}
    cursor_line = None
    if mode == "list":
        name_width = min(16, max((len(fmt.printable(r.name)) for r in rows), default=1))
        for row in rows:
            mark = "▶ " if row.name == cursor else "  "
            hits[len(lines)] = [(0, width, row.name)]
            if row.name == cursor:
                cursor_line = len(lines)
            lines.append(Content(mark) + host_line(row.host, name_width, row.states))
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


class GpuMap(Widget):
    """Draws `hosts` (set by the Health pane) as a map; `cursor`, `filter_text` and the room
    the pane has are set by the pane too. Posts `HostChosen` when a host is opened."""

    # One map line is one screen line (its height is counted so): long lines end in "…".
    DEFAULT_CSS = "GpuMap { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }"

    hosts: reactive[tuple[HostHealth, ...]] = reactive((), repaint=False)
    # Not `query`: that name is Textual's DOM query, which a reactive would replace.
    filter_text: reactive[str] = reactive("", repaint=False)
    cursor: reactive[str | None] = reactive(None, repaint=False)

    class HostChosen(Message):
        """The operator opened a host (Enter on the cursor, or a click on its cells)."""

        def __init__(self, host: str) -> None:
            super().__init__()
            self.host = host

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = FleetView()
        # The hosts `view_for` last worked out, held so that `is` tells them apart.
        self._view_hosts: tuple[HostHealth, ...] | None = None
        self._view = self.view
        self.shown: tuple[HostRow, ...] = ()  # the hosts the filter lets through, in order
        self._room = Size(0, 0)
        self._drawing: Drawing | None = None
        # Until the operator moves the cursor it follows the worst host shown; after,
        # it stays on the host they chose for as long as that host is shown.
        self._pinned = False
        # Each map line's cells by its text and styles, for the width and colours in
        # `_strips_for` (see `render_line`).
        self._strips: dict[tuple[int, str, tuple[Any, ...]], Strip] = {}
        self._strips_for: tuple[Any, ...] | None = None

    # Inputs -------------------------------------------------------------------------

    def watch_hosts(self, hosts: tuple[HostHealth, ...]) -> None:
        self.view = self.view_for(hosts)
        self._filter()

    def view_for(self, hosts: tuple[HostHealth, ...]) -> FleetView:
        """`fleet_view(hosts)`, worked out once for these very hosts: the pane's summary
        line asks for the hosts' states just before the map is given them, and at 1,024
        GPUs each pass over them is a few milliseconds of every refresh."""
        if hosts is not self._view_hosts:
            self._view = fleet_view(hosts)
            self._view_hosts = hosts
        return self._view

    def watch_filter_text(self) -> None:
        self._pinned = False
        self._filter()

    def watch_cursor(self) -> None:
        self._redraw()

    def _filter(self) -> None:
        query = self.filter_text.strip()
        rows = self.view.rows
        self.shown = tuple(r for r in rows if matches(r, query)) if query else rows
        names = [r.name for r in self.shown]
        if self.cursor not in names or not self._pinned:
            self._pinned = False
            self.set_reactive(GpuMap.cursor, names[0] if names else None)
        self._redraw()

    def _redraw(self) -> None:
        if not self._room.width:
            return  # not laid out yet: the first layout draws it
        before = self._drawing
        self._drawing = draw(self.view, self.shown, self._room, self.cursor,
                             self.filter_text.strip())
        after = self._drawing
        if before is None or before.height != after.height or self.text_selection:
            self.refresh(layout=before is None or before.height != after.height)
        else:
            # Only the lines that read otherwise are painted again: from one snapshot to
            # the next most of a fleet's map reads the same, and the screen's work (and
            # what goes to the terminal) follows the area refreshed, cached cells or not.
            width = max(self.size.width, self._room.width)
            changed = [Region(0, y, width, 1) for y, (old, new) in enumerate(
                zip(before.lines, after.lines, strict=True))
                if old.plain != new.plain or old.spans != new.spans]
            if changed:
                self.refresh(*changed)
        self.scroll_to_cursor()

    # Moving -------------------------------------------------------------------------

    def move(self, dx: int, dy: int) -> None:
        """Move the cursor `dx` hosts along and `dy` lines of the map down."""
        names = [r.name for r in self.shown]
        if not names:
            return
        index = names.index(self.cursor) if self.cursor in names else 0
        step = dx + dy * self.per_line()
        self._pinned = True
        self.cursor = names[max(0, min(len(names) - 1, index + step))]

    def per_line(self) -> int:
        """Hosts on one line of the map as drawn now."""
        if self._drawing is None or not self._drawing.hits:
            return 1
        return max(len(spans) for spans in self._drawing.hits.values())

    def open_cursor(self) -> None:
        if self.cursor is not None:
            self.post_message(self.HostChosen(self.cursor))

    def scroll_to_cursor(self) -> None:
        drawing = self._drawing
        if drawing is None or drawing.cursor_line is None or not self.size.height:
            return
        self.call_after_refresh(self._scroll_to_line, drawing.cursor_line)

    def _scroll_to_line(self, line: int) -> None:
        """Bring the cursor's line into the scrolling container's view."""
        container = self.parent
        if isinstance(container, Widget) and container.is_scrollable:
            box = self.virtual_region
            container.scroll_to_region(Region(box.x, box.y + line, box.width, 1),
                                       animate=False, immediate=True)

    def on_click(self, event: events.Click) -> None:
        drawing = self._drawing
        if drawing is None:
            return
        for start, end, name in drawing.hits.get(event.y, ()):
            if start <= event.x < end:
                if name == self.cursor or event.chain > 1:
                    self.post_message(self.HostChosen(name))
                self._pinned = True
                self.cursor = name
                return

    # Drawing ------------------------------------------------------------------------

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        room = Size(width, container.height)
        if room != self._room or self._drawing is None:
            self._room = room
            self._drawing = draw(self.view, self.shown, room, self.cursor,
                                 self.filter_text.strip())
        return self._drawing.height

    def render(self) -> Content:
        if self._drawing is None:
            return Content("")
        return self._drawing.content

    def render_line(self, y: int) -> Strip:
        """Line `y` of the map as `render`'s text would draw it, each line's cells kept
        while that line reads the same (with the same styles) at the same place, width
        and colours. The lines are drawn one by one, which for this text (no wrapping: a
        line never runs onto the next; top-left aligned) gives the cells that the whole
        text gives; a line is drawn below `y` empty ones, as the cells carry their
        offset in the text (for selecting it with the mouse). While text is selected
        Textual draws the whole text, selection included."""
        drawing = self._drawing
        if drawing is None or self.text_selection is not None:
            return super().render_line(y)
        width = self.size.width
        style = self.visual_style
        if y >= min(len(drawing.lines), self.size.height) or not width:
            return Strip.blank(width, style.rich_style)
        app = self.app
        context = (width, app.theme, app.theme_variables, style)
        if context != self._strips_for or len(self._strips) > STRIPS_KEPT:
            self._strips.clear()
            self._strips_for = context
        line = drawing.lines[y]
        key = (y, line.plain, tuple(line.spans))
        strip = self._strips.get(key)
        if strip is None:
            placed = Content("\n" * y) + line if y else line
            strip = self._strips[key] = Visual.to_strips(self, placed, width, y + 1, style)[y]
        return strip
