"""Effect: is it learning? Latest losses, best validation, divergence and the chart."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widgets import Static

from cockpit.analysis.text import counted
from cockpit.snapshot import Effect, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.widgets.loss_chart import LossChart, legend
from cockpit.ui.widgets.pane import Pane, update_text


def effect_line(e: Effect, log_y: bool) -> str:
    parts = [
        f"loss {fmt.loss(e.last_loss)}",
        f"val {fmt.loss(e.last_val_loss)}",
        f"best val {fmt.loss(e.best_val_loss)} @ {fmt.na(e.best_val_step, '{:,}')}",
    ]
    if e.last_loss_scale is not None:
        parts.append(f"AMP scale {e.last_loss_scale:g}")
    parts.append("log-y" if log_y else "linear-y")
    return " · ".join(parts)


def warnings_line(e: Effect) -> str:
    notes = []
    if e.divergence_step is not None:
        notes.append(f"[$warning]diverging since step {e.divergence_step:,}[/]")
    if e.nonfinite_steps:
        count = e.nonfinite_count or len(e.nonfinite_steps)
        last = e.nonfinite_last if e.nonfinite_last is not None else e.nonfinite_steps[-1]
        notes.append(f"[$error]NaN/Inf at {counted(count, 'step')}, last {last:,}[/]")
    if e.spike_steps:
        spikes = counted(len(e.spike_steps), "spike")
        notes.append(f"[$warning]{spikes}, last {e.spike_steps[-1]:,}[/]")
    return " · ".join(notes) or "[$success]no divergence, spikes or NaN/Inf[/]"


class EffectPane(Pane):
    TITLE = "Effect"
    NUMBER = 2

    log_y: reactive[bool] = reactive(False, repaint=False)

    def compose_body(self) -> ComposeResult:
        yield Static(id="effect-line")
        yield Static(id="effect-warnings")
        yield Static(id="loss-legend")
        yield LossChart(id="loss-chart")

    def show(self, snapshot: Snapshot) -> None:
        self._update_lines(snapshot.effect)
        self.query_one(LossChart).effect = snapshot.effect

    def _update_lines(self, effect: Effect) -> None:
        update_text(self.query_one("#effect-line", Static), effect_line(effect, self.log_y))
        update_text(self.query_one("#effect-warnings", Static), warnings_line(effect))
        update_text(self.query_one("#loss-legend", Static), legend(effect, self.log_y))

    def watch_log_y(self, log_y: bool) -> None:
        self.query_one(LossChart).log_y = log_y
        if self.snapshot is not None:
            self._update_lines(self.snapshot.effect)

    def summary(self, snapshot: Snapshot) -> str:
        e = snapshot.effect
        line = f"loss {fmt.loss(e.last_loss)} · val {fmt.loss(e.last_val_loss)}"
        if e.nonfinite_steps:
            return f"{line} · [$error]NaN/Inf[/]"
        if e.divergence_step is not None:
            return f"{line} · [$warning]diverging[/]"
        return line
