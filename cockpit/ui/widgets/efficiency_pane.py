"""Efficiency: is the compute used? Busy, throughput, waits, MFU and stragglers; and,
where the pane has the room, where each rank's step time goes, slowest first."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.events import Resize
from textual.widgets import Static

from agent.wire import states
from cockpit.analysis.efficiency import lag_verdict
from cockpit.analysis.text import printable
from cockpit.snapshot import Efficiency, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.widgets.gauge import Gauge
from cockpit.ui.widgets.pane import Pane, update_text
from cockpit.ui.widgets.spark_bars import FROM_ZERO, PERCENT
from cockpit.ui.widgets.sparkline_chart import SparklineChart

SLOWEST_SHOWN = 3
LAG_STYLE = {"far": "$warning", "behind": "", "even": "$text-muted"}
# The body's lines besides the stragglers' text and the rank table: four gauges, the
# throughput line, the stragglers' margin and two sparklines.
OTHER_LINES = 4 + 1 + 1 + 2
RANK_ROWS_MIN = 2  # the table's header and its slowest rank, or no table


# Job states in which nothing trains now: the step figures are those of its last steps.
IDLE_STATES = {states.PAUSED: "before the pause", states.EXITED: "before it exited",
               states.FINISHED: "before it finished", states.STOPPED: "before it was stopped",
               states.STALLED: "before the stall", states.FAILED: "before it failed",
               states.STARTING: "before the restart"}


def idle_note(e: Efficiency, state: str) -> str:
    """" (before it exited)" when nothing trains now and the throughput is its last."""
    when = IDLE_STATES.get(state)
    return f" [$text-muted]({when})[/]" if when and e.samples_per_s is not None else ""


def throughput_line(e: Efficiency, state: str = states.RUNNING) -> str:
    return (f"throughput {fmt.si(e.samples_per_s)} samples/s · "
            f"{fmt.si(e.tokens_per_s)} tokens/s{idle_note(e, state)}")


def stragglers_line(e: Efficiency) -> Content:
    """Step-time spread and who is slowest: the ranks everyone else waits for."""
    median = fmt.na(e.step_time_median, "{:.3f}s")
    spread = fmt.na(None if e.step_time_spread is None else e.step_time_spread * 100,
                    "{:.0f}%")
    line = Content(f"step time {median} median · spread {spread}")
    slowest = e.slowest_ranks[:SLOWEST_SHOWN]
    if slowest:
        names = ", ".join(f"r{r.rank}@{r.host} {r.step_time:.3f}s" for r in slowest)
        style = "$warning" if lag_verdict(e.step_time_spread) == "far" else "$text-muted"
        # Their own time (step time less the wait for communication): the median step
        # time above includes that wait, so it can read above every rank here.
        line += fmt.markup(f"\n[{style}]slowest, less comm wait: $names[/]", names=names)
    if e.note:
        line += fmt.markup("\n[$warning]$note[/]", note=e.note)
    return line


def _share(share: float | None) -> str:
    return fmt.na(None if share is None else share * 100, "{:.0f}%")


# The table's columns besides the host's: rank, step, own, data, comm, behind, and
# the spaces between.
RANK_COLUMNS = 6 + 7 + 7 + 5 + 5 + 7 + 6
STEP_COLUMN = 7 + 1  # the first to go where the pane is narrow: own + comm tell it
HOST_WIDTH = (6, 16)  # the host column's least and most width


def rank_times_text(e: Efficiency, lines: int, width: int = RANK_COLUMNS + 16) -> Content:
    """Where each rank's step time goes, slowest own time first, in `lines` lines with
    its header: "r13    gpu-node-b        1.030s  0.970s    3%    6%   +12%"; the host
    column narrows to fit `width` (a wrapped line would read as two ranks), and below
    its least the step column goes (the own time and the comm share remain)."""
    if not e.ranks:
        return fmt.own_markup("[$text-muted]no rank has timed a step yet[/]")
    room = lines - 1  # under the header; a line of it says how many more, if any
    rows = e.ranks[:max(1, room - 1)] if e.rank_count > room else e.ranks[:room]
    more = e.rank_count - len(rows)
    columns = RANK_COLUMNS if width >= RANK_COLUMNS + HOST_WIDTH[0] else RANK_COLUMNS - STEP_COLUMN
    host = max(HOST_WIDTH[0], min(HOST_WIDTH[1], width - columns))
    step = f"{'step':>7} " if columns == RANK_COLUMNS else ""
    out = [fmt.own_markup(f"[b]{'rank':<6} {'host':<{host}} {step}{'own':>7} {'data':>5} "
                          f"{'comm':>5} {'behind':>7}[/b]")]
    for r in rows:
        wall = f"{fmt.na(r.wall_time, '{:.3f}s'):>7} " if step else ""
        line = fmt.markup(f"$rank $host {wall}{r.step_time:>6.3f}s "
                          f"{_share(r.data_share):>5} {_share(r.comm_share):>5} ",
                          rank=f"r{r.rank}"[:6].ljust(6),
                          host=printable(r.host)[:host].ljust(host))
        behind = fmt.na(None if r.behind is None else r.behind * 100, "{:+.0f}%")
        style = LAG_STYLE[lag_verdict(r.behind)]
        out.append(line + (fmt.own_markup(f"[{style}]{behind:>7}[/]") if style
                           else Content(f"{behind:>7}")))
    if more > 0:
        out.append(fmt.own_markup(f"[$text-muted]+{more} more rank{'s' if more > 1 else ''}"
                                  f", none slower[/]"))
    return Content("\n").join(out)


class EfficiencyPane(Pane):
    TITLE = "Efficiency"
    NUMBER = 3

    def compose_body(self) -> ComposeResult:
        # Each in the colour of its level, which the snapshot carries.
        yield Gauge("GPU busy", id="gauge-busy")
        yield Gauge("data wait", id="gauge-data")
        yield Gauge("comm", id="gauge-comm")
        yield Gauge("MFU", id="gauge-mfu")
        yield Static(id="throughput")
        yield Static(id="stragglers")
        # No axis beside them: bars from zero, and GPU busy on its 0-100 % (Textual's
        # scale, lowest to highest value, draws a steady 95 % as the lowest bar).
        yield SparklineChart("samples/s", scale=FROM_ZERO, id="spark-throughput")
        yield SparklineChart("GPU busy", scale=PERCENT, id="spark-busy")
        yield Static(id="rank-times")

    def on_resize(self, event: Resize) -> None:
        # The table's rows follow the pane's height.
        if self.snapshot is not None and self._ready:
            self._show_ranks(self.snapshot.efficiency)

    def _show_ranks(self, e: Efficiency) -> None:
        """The rank table in the lines the rest of the body leaves, or none where fewer
        than its header and one rank are left."""
        table = self.query_one("#rank-times", Static)
        body = self.query_one(".body").size
        stragglers = self.query_one("#stragglers", Static)
        # Its height at the body's width as it reads now (its text may have just
        # changed, before the layout that will show it: the sizes laid out are old).
        taken = OTHER_LINES + stragglers.get_content_height(body, body, body.width)
        lines = body.height - taken
        table.display = lines >= RANK_ROWS_MIN
        if table.display:
            update_text(table, rank_times_text(e, lines, body.width))

    def show(self, snapshot: Snapshot) -> None:
        e = snapshot.efficiency
        self.query_one("#gauge-busy", Gauge).show(e.gpu_busy, e.gpu_busy_level)
        self.query_one("#gauge-data", Gauge).show(e.data_wait_pct, e.data_wait_level)
        self.query_one("#gauge-comm", Gauge).show(e.comm_pct, e.comm_level)
        self.query_one("#gauge-mfu", Gauge).show(None if e.mfu is None else e.mfu * 100,
                                                 e.mfu_level)
        update_text(self.query_one("#throughput", Static),
                    fmt.own_markup(throughput_line(e, snapshot.progress.state)))
        update_text(self.query_one("#stragglers", Static), stragglers_line(e))
        self.query_one("#spark-throughput", SparklineChart).series = e.throughput_history
        self.query_one("#spark-busy", SparklineChart).series = e.gpu_busy_history
        self._show_ranks(e)

    def summary(self, snapshot: Snapshot) -> Content:
        e = snapshot.efficiency
        # The note beside the figure it qualifies: a narrow screen cuts the end of the
        # line, which must not be the "before it exited".
        return fmt.own_markup(
            f"busy {fmt.percent(e.gpu_busy)} · {fmt.si(e.samples_per_s)} samples/s"
            f"{idle_note(e, snapshot.progress.state)} · "
            f"data wait {fmt.percent(e.data_wait_pct)} · MFU "
            f"{fmt.percent(None if e.mfu is None else e.mfu * 100)}")
