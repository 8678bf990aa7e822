"""Progress: where is the job? Stage, position, ETA as an estimate, and stalls."""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import ProgressBar, Static

from cockpit.analysis.text import counted
from cockpit.snapshot import Progress, Snapshot
from cockpit.ui import format as fmt
from cockpit.ui.widgets.pane import Pane, update_text

_STATE_STYLE = {
    "running": "$success",
    "paused": "$warning",
    "stalled": "$error",
    "recovering": "$warning",
    "finished": "$success",
    "exited": "$text-muted",
    "stopped": "$text-muted",
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


class ProgressPane(Pane):
    TITLE = "Progress"
    NUMBER = 1

    def compose_body(self) -> ComposeResult:
        yield Static(id="progress-position")
        yield Static(id="progress-counts")
        yield ProgressBar(total=100, show_eta=False, id="progress-bar")
        yield Static(id="progress-eta")
        yield Static(id="progress-last")
        yield Static(id="stall-banner", classes="stall")

    def show(self, snapshot: Snapshot) -> None:
        p = snapshot.progress
        update_text(self.query_one("#progress-position", Static), _position(p))
        update_text(self.query_one("#progress-counts", Static),
                    Content(f"samples {fmt.si(p.samples)} · tokens {fmt.si(p.tokens)}"))
        bar = self.query_one("#progress-bar", ProgressBar)
        # An unknown total animates the bar, which says "working": only while it is.
        moving = p.percent is None and p.state in ("running", "starting", "recovering")
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
