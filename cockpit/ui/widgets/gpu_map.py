"""The fleet's GPUs at a glance: one cell per GPU, grouped by host, worst hosts first.

A cell's colour is its state's level and its glyph the state itself (● ok, · idle,
▲ hot, ▼ throttled, ? stale, ◆ ECC, ✖ XID, ○ offline), so the map reads the same in
every theme and without colour; the verdicts are `cockpit.analysis.gpu_state`'s. The
map picks the densest form the room needs: one line per host (a few hosts, with their
figures, and with room to spare each GPU's own under it, in the lines the pane does
not keep for the interruptions), one cell per GPU (blocks of a host's GPUs), or, where
even that does not fit (80 × 24 with 128 hosts), one cell per host in its worst GPU's
state. Host CPU, memory, disk and network follow on one line: the fullest host's
share, and how many hosts are high or full (the fullest named); the line under it is
the cursor's host in words.
That text is `map_text`'s; this module is the widget that draws it.

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

from typing import Any

from textual import events
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style
from textual.visual import Visual
from textual.widget import Widget

from cockpit.snapshot import HostHealth
from cockpit.ui.widgets.map_text import Drawing, FleetView, HostRow, draw, fleet_view, matches

# Map lines whose cells are kept (`GpuMap.render_line`): more than a screen's worth, so
# that a line that comes back after a few snapshots (a host's state flapping) is found.
STRIPS_KEPT = 1024
_EMPTY = Content("")


def _line_key(y: int, line: Content) -> tuple[int, str, tuple[Any, ...]]:
    """A map line's cells are the same while its place, text and styles are."""
    return (y, line.plain, tuple(line.spans))


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
        # Lines of the room the pane keeps under the map (the interruptions' log).
        self._reserve = 0
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

    def keep_under(self, lines: int) -> None:
        """Keep `lines` of the room for what the pane shows under the map: the map's
        hosts' GPU figures take only the rest."""
        if lines != self._reserve:
            self._reserve = lines
            self._redraw()

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
                             self.filter_text.strip(), self._reserve)
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
                                 self.filter_text.strip(), self._reserve)
        return self._drawing.height

    def render(self) -> Content:
        if self._drawing is None:
            return Content("")
        return self._drawing.content

    def render_line(self, y: int) -> Strip:
        """Line `y` of the map as `render`'s text would draw it, each line's cells kept
        while that line reads the same (with the same styles) at the same place, width
        and colours. While text is selected Textual draws the whole text, selection
        included."""
        drawing = self._drawing
        if drawing is None or self.text_selection is not None:
            return super().render_line(y)
        width = self.size.width
        style = self.visual_style
        height = min(len(drawing.lines), self.size.height)
        if y >= height or not width:
            return Strip.blank(width, style.rich_style)
        app = self.app
        context = (width, app.theme, app.theme_variables, style)
        if context != self._strips_for or len(self._strips) > STRIPS_KEPT:
            self._strips.clear()
            self._strips_for = context
        key = _line_key(y, drawing.lines[y])
        strip = self._strips.get(key)
        if strip is None:
            self._draw_missing(drawing.lines[:height], width, style)
            strip = self._strips[key]
        return strip

    def _draw_missing(self, lines: tuple[Content, ...], width: int, style: Style) -> None:
        """Draw every line not kept, up to the last such, in one pass, and keep them.

        The lines are drawn as one text with the kept ones left empty: for this text
        (no wrapping, a line never runs onto the next; top-left aligned) each line's
        cells are those the whole text gives, and they carry their place in the text
        (for selecting it with the mouse), so a line is drawn below the ones above it.
        One pass, not a pass per line: Textual's fixed cost of a pass and the lines
        above each line drawn again made a repaint of all 16 lines of two hosts'
        figures 3.8 ms, quadratic in the lines."""
        keys = [_line_key(y, line) for y, line in enumerate(lines)]
        held = self._strips
        missing = [y for y, key in enumerate(keys) if key not in held]
        last = missing[-1]
        text = Content("\n").join([line if keys[y] not in held else _EMPTY
                                    for y, line in enumerate(lines[:last + 1])])
        strips = Visual.to_strips(self, text, width, last + 1, style)
        for y in missing:
            held[keys[y]] = strips[y]
