"""The top line: where the data comes from (LIVE / REPLAY 10x), which job, and when.

The source label is always shown first and inverted. Live, the clock ticks on its own
and the data time says how fresh the snapshot behind every pane is. A replay has no
"now": the time shown is the recording's at the replay cursor, with its date (a
recording is seldom of today), and today's clock beside it would read as live.
"""

from __future__ import annotations

import time

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from cockpit.analysis.lifecycle import ENDED_STATES
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
    replaying: reactive[bool] = reactive(False)
    # Why the newest snapshot could not be built ("" when it could): the panes show the
    # last one that could, and its notice goes after 8 s, so the header keeps saying it.
    failing: reactive[str] = reactive("")
    # Warnings and errors told in toasts since the notification history was last read:
    # an operator back at the screen learns that something was said while away.
    unread: reactive[int] = reactive(0)
    notices_key: reactive[str] = reactive("")  # the key that lists them, where known

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        if not self.replaying:  # the clock: a replay's time moves with its snapshots
            self.refresh()

    def render(self) -> Content:
        """The parts that fit the width, in their fixed order; what does not fit goes
        least needed first (the clock, then the job's place), so the source, the job and
        the alerts (above all a critical one) are on screen at 80 columns too."""
        snap = self.snapshot
        label = self.label or (snap.source_label if snap else "")
        # (text, rank): rank 0 is always shown; higher ranks are dropped first. The
        # source label, the job and a failure's text go in as text (`fmt.markup`).
        parts: list[tuple[Content, int]] = [
            (fmt.markup("[b reverse $accent] $label [/]", label=label or "NO SOURCE"), 0)]
        if self.paused and "PAUSED" not in label.upper():
            parts.append((fmt.own_markup("[$warning]⏸ paused[/]"), 0))
        parts.append((fmt.markup("[b]$job[/]", job=(snap.job if snap else None) or "job n/a"),
                      0))
        if snap is not None and job_place(snap):
            # Starts with a space: glued to the job.
            parts.append((fmt.own_markup(job_place(snap)), 4))
        if self.failing:
            parts.append((fmt.markup("[$error]⚠ not updating: $why[/]",
                                     why=_short(self.failing)), 1))
        if self.unread:
            key = " ($key)" if self.notices_key else ""
            parts.append((fmt.markup(
                f"[$warning]✉ {counted(self.unread, 'unread notice')}{key}[/]",
                key=self.notices_key), 1))
        if self.replaying:
            parts.append((Content(f"recorded {fmt.timestamp(snap.ts if snap else None)}"), 2))
        else:
            parts.append((Content(f"data {fmt.clock(snap.ts if snap else None)}"), 2))
            parts.append((Content(f"now {fmt.clock(wall_clock())}"), 5))
        if snap is not None:
            # Resolved and acknowledged ones stay listed in Alerts, not counted here.
            active = [a for a in snap.alerts if a.state == "active"]
            critical = sum(1 for a in active if a.severity == "critical")
            if critical:
                parts.append((fmt.own_markup(f"[$error]⚠ {critical} critical[/]"), 0))
            parts.append((Content(counted(len(active), "alert")), 0))
            parts.append((Content("controllable") if snap.controllable
                          else fmt.own_markup("[$text-muted]read-only[/]"), 3))
        return fit_parts(parts, self.size.width or 10_000)


def _short(text: str, limit: int = 60) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fit_parts(parts: list[tuple[Content, int]], width: int) -> Content:
    """`parts` joined by " │ " (a part starting with a space is glued to the one before),
    dropping the highest ranks, rightmost first, until the line fits."""
    shown = list(parts)
    bar = Content(" │ ")
    while True:
        line = Content("").join(
            text if i == 0 or text.plain.startswith(" ") else bar + text
            for i, (text, _) in enumerate(shown))
        droppable = [rank for _, rank in shown if rank > 0]
        if line.cell_length <= width or not droppable:
            return line
        worst = max(droppable)
        del shown[max(i for i, (_, rank) in enumerate(shown) if rank == worst)]


def job_place(snap: Snapshot) -> str:
    """Which of several jobs is shown (a fork and its parent side by side, or a job
    picked with `j` that no longer trains), so the operator knows `j` leads elsewhere."""
    training, jobs = snap.jobs_training, snap.jobs
    if snap.job in training and len(training) > 1:
        return f" [$text-muted]({training.index(snap.job) + 1} of {len(training)} training)[/]"
    if snap.job is not None and snap.job not in training and len(jobs) > 1:
        # A job that ended says how (finished, stopped, failed …): "not training" beside
        # a count of the others read as if it were one of them, idle.
        # (one of our own words, never a host's: safe in markup)
        state = snap.progress.state if snap.progress.state in ENDED_STATES else "not training"
        return (f" [$text-muted]({state}; {len(training)} of {len(jobs)} jobs "
                "training)[/]")
    return ""
