"""Effect: is it learning? Latest losses, best validation, divergence and the chart,
and under it the learning rate: its course and value now (a sparkline), and the
operator's changes of it (each also marked ▼ on the loss chart, at its step). The chart
also marks restarts and the hardware and link faults at their steps (`t` hides them)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from cockpit.analysis.lr import lr_change_text, lr_value
from cockpit.analysis.text import counted
from cockpit.snapshot import Effect, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.widgets.loss_chart import FAULT_STYLES, LossChart, legend
from cockpit.ui.widgets.pane import Pane, update_text
from cockpit.ui.widgets.sparkline_chart import SparklineChart

LR_CHANGES_SHOWN = 2  # the newest; the report lists them all


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


def newest_fault(e: Effect) -> Content | None:
    """The newest fault marked on the chart, in words: "X gpu-node-b: XID 79 gpu 3 at
    step 11,860" (a host's name comes from the wire: shown as text, never as markup)."""
    if not e.faults:
        return None
    fault = e.faults[-1]
    glyph, colour = next(((marker, colour) for kind, marker, _, colour in FAULT_STYLES
                          if kind == fault.kind), ("?", "error"))
    return (fmt.own_markup(f"[${colour}]{glyph}[/] ") + fmt.text(fault.text)
            + Content(f" at step {fault.step:,}"))


def lr_line(e: Effect) -> Content:
    """The operator's LR changes, newest last: "▼ lr_scale=0.1 at step 1,200: 0.0003 →
    3e-05" (the LR now is on the LR chart's line above). A knob's value comes from the
    trainer: shown as text, never as markup."""
    changes = e.lr_changes[-LR_CHANGES_SHOWN:]
    if not changes:
        return fmt.own_markup("[$text-muted]LR not changed by the operator[/]")
    parts = [fmt.own_markup("[$secondary]▼[/] ") + fmt.text(lr_change_text(c))
             for c in changes]
    earlier = len(e.lr_changes) - len(changes)
    if earlier:
        parts.insert(0, Content(f"LR: {counted(earlier, 'earlier change')}"))
    return Content(" · ").join(parts)


class EffectPane(Pane):
    TITLE = "Effect"
    NUMBER = 2

    log_y: reactive[bool] = reactive(False, repaint=False)
    timeline: reactive[bool] = reactive(True, repaint=False)  # `t`: the chart's events

    def compose_body(self) -> ComposeResult:
        yield Static(id="effect-line")
        yield Static(id="effect-warnings")
        yield Static(id="loss-legend")
        yield LossChart(id="loss-chart")
        yield SparklineChart("LR", id="spark-lr", value_text=lr_value)
        yield Static(id="effect-lr")

    def show(self, snapshot: Snapshot) -> None:
        self._update_lines(snapshot.effect)
        self.query_one(LossChart).effect = snapshot.effect
        self.query_one("#spark-lr", SparklineChart).series = snapshot.effect.lr

    def _update_lines(self, effect: Effect) -> None:
        # Figures and the cockpit's own words: no wire text to keep out of markup.
        update_text(self.query_one("#effect-line", Static),
                    Content(effect_line(effect, self.log_y)))
        warnings = fmt.own_markup(warnings_line(effect))
        fault = newest_fault(effect) if self.timeline else None
        update_text(self.query_one("#effect-warnings", Static),
                    warnings if fault is None else warnings + Content(" · ") + fault)
        update_text(self.query_one("#loss-legend", Static),
                    fmt.own_markup(legend(effect, self.log_y, self.timeline)))
        update_text(self.query_one("#effect-lr", Static), lr_line(effect))

    def watch_timeline(self, timeline: bool) -> None:
        self.query_one(LossChart).timeline = timeline
        if self.snapshot is not None:
            self._update_lines(self.snapshot.effect)

    def watch_log_y(self, log_y: bool) -> None:
        self.query_one(LossChart).log_y = log_y
        if self.snapshot is not None:
            self._update_lines(self.snapshot.effect)

    def summary(self, snapshot: Snapshot) -> Content:
        e = snapshot.effect
        line = f"loss {fmt.loss(e.last_loss)} · val {fmt.loss(e.last_val_loss)}"
        if e.nonfinite_steps:
            return fmt.own_markup(f"{line} · [$error]NaN/Inf[/]")
        if e.divergence_step is not None:
            return fmt.own_markup(f"{line} · [$warning]diverging[/]")
        return Content(line)
