"""Efficiency: is the compute used? Busy, throughput, waits, MFU and stragglers."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from agent.wire import states
from cockpit.snapshot import Efficiency, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.widgets.gauge import Gauge
from cockpit.ui.widgets.pane import Pane, update_text
from cockpit.ui.widgets.spark_bars import FROM_ZERO, PERCENT
from cockpit.ui.widgets.sparkline_chart import SparklineChart

SLOWEST_SHOWN = 3


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
        style = "$warning" if (e.step_time_spread or 0) >= 0.2 else "$text-muted"
        # Their own time (step time less the wait for communication): the median step
        # time above includes that wait, so it can read above every rank here.
        line += fmt.markup(f"\n[{style}]slowest, less comm wait: $names[/]", names=names)
    if e.note:
        line += fmt.markup("\n[$warning]$note[/]", note=e.note)
    return line


class EfficiencyPane(Pane):
    TITLE = "Efficiency"
    NUMBER = 3

    def compose_body(self) -> ComposeResult:
        # Thresholds (good, bad) are common rules of thumb for large-model training.
        yield Gauge("GPU busy", good=80, bad=50, id="gauge-busy")
        yield Gauge("data wait", good=5, bad=30, id="gauge-data")
        yield Gauge("comm", good=15, bad=40, id="gauge-comm")
        yield Gauge("MFU", good=35, bad=15, id="gauge-mfu")
        yield Static(id="throughput")
        yield Static(id="stragglers")
        # No axis beside them: bars from zero, and GPU busy on its 0-100 % (Textual's
        # scale, lowest to highest value, draws a steady 95 % as the lowest bar).
        yield SparklineChart("samples/s", scale=FROM_ZERO, id="spark-throughput")
        yield SparklineChart("GPU busy", scale=PERCENT, id="spark-busy")

    def show(self, snapshot: Snapshot) -> None:
        e = snapshot.efficiency
        self.query_one("#gauge-busy", Gauge).value = e.gpu_busy
        self.query_one("#gauge-data", Gauge).value = e.data_wait_pct
        self.query_one("#gauge-comm", Gauge).value = e.comm_pct
        self.query_one("#gauge-mfu", Gauge).value = None if e.mfu is None else e.mfu * 100
        update_text(self.query_one("#throughput", Static),
                    fmt.own_markup(throughput_line(e, snapshot.progress.state)))
        update_text(self.query_one("#stragglers", Static), stragglers_line(e))
        self.query_one("#spark-throughput", SparklineChart).series = e.throughput_history
        self.query_one("#spark-busy", SparklineChart).series = e.gpu_busy_history

    def summary(self, snapshot: Snapshot) -> Content:
        e = snapshot.efficiency
        # The note beside the figure it qualifies: a narrow screen cuts the end of the
        # line, which must not be the "before it exited".
        return fmt.own_markup(
            f"busy {fmt.percent(e.gpu_busy)} · {fmt.si(e.samples_per_s)} samples/s"
            f"{idle_note(e, snapshot.progress.state)} · "
            f"data wait {fmt.percent(e.data_wait_pct)} · MFU "
            f"{fmt.percent(None if e.mfu is None else e.mfu * 100)}")
