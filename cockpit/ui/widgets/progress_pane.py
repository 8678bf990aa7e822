"""Progress: where is the job? Stage, position, ETA as an estimate, and stalls; where
each rank (or host) is and how far it trails; throughput by step with the restarts and
faults marked (on the loss chart's axis); and the job's stages over time as a band.

The table, the chart and the band each draw as one widget whatever the fleet's size:
a 128-host job is one table of its hosts furthest behind, not a widget per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby

from textual.app import ComposeResult
from textual.content import Content
from textual.events import Resize
from textual.geometry import Size
from textual.reactive import reactive
from textual.widgets import ProgressBar, Static

from agent.wire import states
from cockpit.analysis import timeline
from cockpit.analysis.rank_progress import progress_rows, rows_taken
from cockpit.analysis.text import counted, printable
from cockpit.analysis.timeline import STAGES, band_cells
from cockpit.snapshot import Progress, RankProgress, Snapshot, StageSpan
from cockpit.ui import format as fmt
from cockpit.ui.widgets.loss_chart import timeline_legend
from cockpit.ui.widgets.pane import Pane, update_text
from cockpit.ui.widgets.throughput_chart import Throughput, ThroughputChart

_STATE_STYLE = {
    states.RUNNING: "$success",
    states.PAUSED: "$warning",
    states.STALLED: "$error",
    states.RECOVERING: "$warning",
    states.FINISHED: "$success",
    states.EXITED: "$text-muted",
    states.STOPPED: "$text-muted",
}


def _position(p: Progress) -> Content:
    step = fmt.na(p.step, "{:,}")
    total = fmt.na(p.total_steps, "{:,}")
    epoch = fmt.na(p.epoch, "{:.2f}")
    return fmt.markup(f"stage [b]$stage[/b] · epoch {epoch} · step {step} / {total}",
                      stage=p.stage or "n/a")


BAR_STEPS_PER_PERCENT = 20  # far finer than a bar's half-cell, or its whole-% label


def bar_progress(percent: float | None) -> float:
    """What the progress bar is given: the percentage rounded down to a twentieth.

    The bar redraws whenever its value changes, and a long job moves by a few
    millionths of a percent per refresh, which no cell of the bar shows. Rounding down
    keeps the bar and its label from ever showing more than is done.
    """
    if percent is None:
        return 0.0
    # Divided last, so that a whole percentage comes back exact (95.0, not 94.999...).
    return math.floor(percent * BAR_STEPS_PER_PERCENT + 1e-9) / BAR_STEPS_PER_PERCENT


def eta_text(p: Progress) -> str:
    """ETA with its band, always labelled an estimate: it extrapolates recent speed."""
    if p.eta_note is not None:
        return f"ETA n/a: job {p.eta_note}{resume_text(p)}"
    if p.eta_seconds is None:
        return "ETA n/a (estimate needs a few steps and a known total)"
    band = ""
    if p.eta_low is not None and p.eta_high is not None:
        band = f" ({fmt.duration(p.eta_low)} – {fmt.duration(p.eta_high)})"
    speed = fmt.na(p.steps_per_second, "{:.2f}")
    return f"ETA ~{fmt.duration(p.eta_seconds)}{band} estimate, at {speed} steps/s"


def resume_text(p: Progress) -> str:
    """Where a paused job's resume starts, when that is before the newest step shown: the
    steps between are trained again, and the position line alone would hide that."""
    if p.resume_step is None:
        return ""
    if p.step is not None and p.step > p.resume_step:
        redone = counted(p.step - p.resume_step, "step")
        return f"; resumes from step {p.resume_step:,} ({redone} redone)"
    return f"; resumes from step {p.resume_step:,}"


def stall_text(p: Progress) -> Content:
    cause = p.stall_cause or "cause unknown"
    detail = f" — {p.stall_detail}" if p.stall_detail else ""
    return fmt.text(f"⚠ STALLED: likely {cause}{detail}")


# How each stage (`cockpit.analysis.timeline.STAGES`) shows in the band: (glyph, theme
# colour). A glyph of its own for each, so colour is never the only thing telling them
# apart; a stage given none here shows as OTHER_STAGE.
STAGE_STYLES = {
    timeline.TRAIN_STAGE: ("━", "success"), timeline.EVAL_STAGE: ("≡", "accent"),
    timeline.CHECKPOINT_STAGE: ("▮", "primary"),
    timeline.START_UP_STAGE: ("┄", "text-muted"), timeline.PAUSED_STAGE: ("‖", "warning"),
    timeline.RESTARTING_STAGE: ("↻", "error"),
}
OTHER_STAGE = ("─", "foreground")  # a stage the trainer named that the band does not know
RANK_ROWS_MAX = 8  # the table's lines at most: the chart below keeps the rest
RANK_ROWS_MIN = 3  # its header, the rank or host furthest behind, and how many more
CHART_LINES = 7  # the chart's least height with its heading
BAND_LINES = 2  # the band and its legend


@dataclass(frozen=True)
class Share:
    """How the lines under the text and the bar are shared."""

    table: int  # the most lines the table of ranks may take
    chart: bool  # the throughput chart and its heading are shown
    band: bool  # the stages band and its legend are shown


def allot(room: int, table_least: int) -> Share:
    """The table gets its least (its header, the rank furthest behind and how many
    more), then the chart its least, then the band; what is left widens the table, to
    `RANK_ROWS_MAX` while the chart is shown (the chart, sized by the fraction, takes
    the rest). What has no room is not shown, rather than a heading whose chart is out
    of sight or a band cut in half."""
    left = room - table_least
    chart = left >= CHART_LINES
    left -= CHART_LINES if chart else 0
    band = left >= BAND_LINES
    left -= BAND_LINES if band else 0
    table = table_least + max(0, left)
    return Share(min(table, max(RANK_ROWS_MAX, table_least)) if chart else table, chart, band)


# The table's columns besides the first two: step, steps/s and lag, and the spaces.
RANK_FIGURES = 10 + 8 + 7 + 4
HOST_LEAST = 8  # the host column narrows to fit the pane, to this at the least


def ranks_text(ranks: tuple[RankProgress, ...], lines: int, width: int = 80) -> Content:
    """The table of ranks (or hosts) furthest behind, in `lines` lines with its header:
    "rank 13    gpu-node-b   11,997   0.97   3"; the host column narrows to fit `width`
    (a wrapped line would put a lag under the wrong host)."""
    if not ranks:
        return fmt.own_markup("[$text-muted]no rank has reported a step yet[/]")
    rows, more = progress_rows(ranks, max(1, lines - 1))
    per_rank = bool(rows) and rows[0].rank is not None
    # Per rank: the rank and its host; per host: the host (wider) and its ranks.
    first, second = (10, 16) if per_rank else (26, 6)
    room = width - RANK_FIGURES
    if per_rank:
        second = max(HOST_LEAST, min(second, room - first))
    else:
        first = max(HOST_LEAST, min(first, room - second))
    kind = "rank" if per_rank else "host"
    head = fmt.own_markup(
        f"[b]{kind:<{first}} {'host' if per_rank else 'ranks':<{second}} {'step':>10} "
        f"{'steps/s':>8} {'lag':>7}[/b]")
    out = [head]
    for row in rows:
        speed = fmt.na(row.steps_per_second, "{:.2f}")
        line = fmt.markup(f"$label $second {row.step:>10,} {speed:>8} ",
                          label=printable(row.label)[:first].ljust(first),
                          second=printable(row.host if per_rank else str(row.ranks))
                          [:second].ljust(second))
        lag = f"{row.lag:>7,}"
        out.append(line + (fmt.own_markup(f"[$warning]{lag}[/]") if row.lag
                           else Content(lag)))
    if more:
        out.append(fmt.own_markup(
            f"[$text-muted]+{more} more {kind}s, none further behind[/]"))
    return Content("\n").join(out)


def _stage_key(stage: str) -> Content:
    """The band's legend entry of `stage`: its glyph in its colour, and its name."""
    glyph, colour = STAGE_STYLES.get(stage, OTHER_STAGE)
    return fmt.own_markup(f"[${colour}]{glyph}[/] ") + Content(stage)


def band_text(spans: tuple[StageSpan, ...], now: float, width: int) -> Content:
    """The stages from the job's first start to `now` in `width` cells, and under them
    the stages shown and the time the band spans."""
    if not spans or width <= 0:
        return fmt.own_markup("[$text-muted]stages: none recorded yet[/]")
    lo = spans[0].start
    cells = band_cells(spans, lo, max(now, spans[-1].end), width)
    parts = []
    for stage, run in groupby(cells):  # a run of cells in one stage is one span of style
        count = len(list(run))
        if stage is None:
            parts.append(Content(" " * count))
            continue
        glyph, colour = STAGE_STYLES.get(stage, OTHER_STAGE)
        parts.append(fmt.own_markup(f"[${colour}]{glyph * count}[/]"))
    shown = {c for c in cells if c is not None}
    known = [s for s in STAGES if s in shown]
    keys = Content("  ").join(_stage_key(s) for s in known)
    others = sorted(shown - set(STAGES))
    if others:
        keys += Content(f"  {OTHER_STAGE[0]} ") + fmt.text(", ".join(others))
    span = Content(f"  · last {fmt.duration(max(now, spans[-1].end) - lo)}")
    return Content("").join(parts) + Content("\n") + keys + span


def throughput_heading(snapshot: Snapshot, timeline: bool) -> Content:
    """The chart's unit and what its marks mean."""
    e = snapshot.effect
    unit = "samples/s" if snapshot.efficiency.samples_per_s is not None else "steps/s"
    marks = timeline_legend(e.markers, e.faults) if timeline else []
    hidden = not timeline and (e.markers or e.faults)
    tail = "  ".join(marks) or ("[$text-muted]events hidden[/]" if hidden else "")
    return Content(f"{unit}  ") + fmt.own_markup(tail)


class ProgressPane(Pane):
    TITLE = "Progress"
    NUMBER = 1

    timeline: reactive[bool] = reactive(True, repaint=False)

    def compose_body(self) -> ComposeResult:
        yield Static(id="progress-position")
        yield Static(id="progress-counts")
        yield ProgressBar(total=100, show_eta=False, id="progress-bar")
        yield Static(id="progress-eta")
        yield Static(id="progress-last")
        yield Static(id="stall-banner", classes="stall")
        yield Static(id="progress-ranks")
        yield Static(id="throughput-heading")
        yield ThroughputChart(id="throughput-chart")
        yield Static(id="progress-stages")

    def on_resize(self, event: Resize) -> None:
        # The table's rows and the band's cells follow the pane's size.
        if self.snapshot is not None and self._ready:
            self._show_fleet(self.snapshot)

    def watch_timeline(self, timeline: bool) -> None:
        if not self._ready:
            return
        self.query_one(ThroughputChart).timeline = timeline
        if self.snapshot is not None:
            update_text(self.query_one("#throughput-heading", Static),
                        throughput_heading(self.snapshot, timeline))

    def _show_fleet(self, snapshot: Snapshot) -> None:
        """The table, the chart and the band, in the lines the text above leaves."""
        p = snapshot.progress
        body = self.query_one(".body").size
        table = self.query_one("#progress-ranks", Static)
        width = table.size.width or max(self.size.width - 4, 1)
        # The table at its least: its header (or the line saying no rank yet) and rows.
        least = 1 + rows_taken(p.ranks, RANK_ROWS_MIN - 1)
        share = allot(body.height - self._above_lines(body), least)
        update_text(table, ranks_text(p.ranks, share.table, width))
        heading = self.query_one("#throughput-heading", Static)
        chart = self.query_one(ThroughputChart)
        heading.display = chart.display = share.chart
        update_text(heading, throughput_heading(snapshot, self.timeline))
        e = snapshot.effect
        chart.data = Throughput(
            snapshot.efficiency.throughput_history, markers=e.markers, faults=e.faults)
        band = self.query_one("#progress-stages", Static)
        band.display = share.band
        update_text(band, band_text(p.stages, snapshot.ts, band.size.width or width))

    def _above_lines(self, body: Size) -> int:
        """The lines above the table at the `body`'s width as their text reads now (it
        may have just changed, before the layout that shows it): the text, wrapped where
        the pane is narrow, the bar with its margins, and the stall banner when shown."""
        above = [self.query_one(f"#progress-{name}", Static)
                 for name in ("position", "counts", "eta", "last")]
        banner = self.query_one("#stall-banner", Static)
        if banner.display:
            above.append(banner)
        lines = sum(w.get_content_height(body, body, body.width) for w in above)
        bar = self.query_one("#progress-bar", ProgressBar)
        return lines + bar.outer_size.height + bar.styles.margin.height

    def show(self, snapshot: Snapshot) -> None:
        p = snapshot.progress
        update_text(self.query_one("#progress-position", Static), _position(p))
        update_text(self.query_one("#progress-counts", Static),
                    Content(f"samples {fmt.si(p.samples)} · tokens {fmt.si(p.tokens)}"))
        bar = self.query_one("#progress-bar", ProgressBar)
        # An unknown total animates the bar, which says "working": only while it is.
        moving = p.percent is None and p.state in (states.RUNNING, states.STARTING,
                                                   states.RECOVERING)
        bar.update(total=None if moving else 100, progress=bar_progress(p.percent))
        update_text(self.query_one("#progress-eta", Static), fmt.text(eta_text(p)))
        style = _STATE_STYLE.get(p.state, "$text-muted")
        last = "no step yet" if p.since_last_step is None else \
            f"last step {fmt.duration(p.since_last_step)} ago"
        update_text(self.query_one("#progress-last", Static),
                    fmt.markup(f"{last} · state [{style}]$state[/]", state=p.state))
        banner = self.query_one("#stall-banner", Static)
        banner.display = p.stalled
        if p.stalled:
            update_text(banner, stall_text(p))
        self._show_fleet(snapshot)

    def summary(self, snapshot: Snapshot) -> Content:
        p = snapshot.progress
        if p.step is None:
            return fmt.text(f"no step yet · {p.state}")
        head = f"step {p.step:,} · {fmt.percent(p.percent, 1)}"
        head += f" · {p.eta_note}" if p.eta_note else f" · ETA ~{fmt.duration(p.eta_seconds)}"
        if p.stalled:
            return fmt.markup("$head · [$error]STALLED ($cause)[/]", head=head,
                              cause=p.stall_cause or "cause unknown")
        said = p.eta_note is not None and p.eta_note.startswith(p.state)
        return fmt.text(head if said else f"{head} · {p.state}")
