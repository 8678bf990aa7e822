"""The top line: where the data comes from (LIVE / REPLAY 10x), which job, and when.

The source label is the only place live and replay differ on screen, so it is always
shown first and inverted. The clock ticks on its own; the data time says how fresh the
snapshot behind every pane is.
"""

from __future__ import annotations

import time

from textual.content import Content
from textual.markup import escape
from textual.reactive import reactive
from textual.widget import Widget

from cockpit.analysis.text import counted
from cockpit.snapshot import Snapshot
from cockpit.ui import format as fmt


def wall_clock() -> float:
    """Now, for the header clock (replaced in tests so screenshots are stable)."""
    return time.time()


class StatusBar(Widget):
    DEFAULT_CSS = """
    StatusBar { dock: top; height: 1; background: $panel; color: $foreground; }
    """

    snapshot: reactive[Snapshot | None] = reactive(None)
    label: reactive[str] = reactive("")
    paused: reactive[bool] = reactive(False)

    def on_mount(self) -> None:
        self.set_interval(1.0, self.refresh)

    def render(self) -> Content:
        snap = self.snapshot
        label = self.label or (snap.source_label if snap else "")
        parts = [f"[b reverse $accent] {escape(label or 'NO SOURCE')} [/]"]
        if self.paused and "PAUSED" not in label.upper():
            parts.append("[$warning]⏸ paused[/]")
        parts.append(f"[b]{escape((snap.job if snap else None) or 'job n/a')}[/]")
        if snap is not None:
            parts[-1] += job_place(snap)
        parts.append(f"data {fmt.clock(snap.ts if snap else None)}")
        parts.append(f"now {fmt.clock(wall_clock())}")
        if snap is not None:
            critical = sum(1 for a in snap.alerts if a.severity == "critical")
            if critical:
                parts.append(f"[$error]⚠ {critical} critical[/]")
            parts.append(counted(len(snap.alerts), "alert"))
            parts.append("controllable" if snap.controllable else "[$text-muted]read-only[/]")
        return Content.from_markup(" │ ".join(parts))


def job_place(snap: Snapshot) -> str:
    """Which of several jobs is shown (a fork and its parent side by side, or a job
    picked with `j` that no longer trains), so the operator knows `j` leads elsewhere."""
    training, jobs = snap.jobs_training, snap.jobs
    if snap.job in training and len(training) > 1:
        return f" [$text-muted]({training.index(snap.job) + 1} of {len(training)} training)[/]"
    if snap.job is not None and snap.job not in training and len(jobs) > 1:
        return (f" [$text-muted](not training; {len(training)} of {len(jobs)} jobs "
                "training)[/]")
    return ""
