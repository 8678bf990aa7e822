"""Interruptions and recoveries: what stopped the job, when, and what it cost."""

from __future__ import annotations

from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Static

from agent.wire import states
from cockpit.analysis.text import (
    ended_text,
    failed_restarts_text,
    unrecovered_text,
)
from cockpit.snapshot import Interruption
from cockpit.ui import format as fmt
from cockpit.ui.widgets.pane import update_text

SHOWN = 5


# s from a failure to its detection from which the line says it: a crash is seen within
# a look (a second or two, not worth the room); a hang only once its silence outlasts the
# limit, and then the time shown, the detection's, is long after the failure.
SHOW_LATENCY_S = 10.0


def interruption_line(item: Interruption, newest: bool = False, state: str = "") -> Content:
    """`newest` and the job's `state` tell whether an outage without a recovery may yet
    recover (its restart under way) or will not (the agent gave up)."""
    # The time shown is when the failure was detected; the agent counts the time down
    # from the failure itself (a hang: its last step) to the first new step.
    if item.recovered_in is not None:
        recovered = fmt.text(f"recovered, down {fmt.duration(item.recovered_in)}")
    elif item.ended_by is not None:
        recovered = fmt.markup("[$text-muted]$said[/]", said=ended_text(item.ended_by))
    else:
        said = unrecovered_text(None, newest, state)
        colour = "$warning" if state in states.RESTARTING and newest else "$error"
        recovered = fmt.markup(f"[{colour}]$said[/]", said=said)
    lost = fmt.na(item.steps_lost, "{:,}")
    latency = item.detection_latency
    seen = (f" (seen {fmt.duration(latency)} after it)"
            if latency is not None and latency >= SHOW_LATENCY_S else "")
    line = fmt.text(f"{fmt.clock(item.detected_at)} {item.cause}{where_text(item)}"
                    f"{seen} · ") + recovered + fmt.text(f" · {lost} steps lost")
    if item.restart_count is not None:
        line += fmt.text(f" · restart #{item.restart_count}")
    if item.failed_restarts:
        line += fmt.text(f" ({failed_restarts_text(item.failed_restarts)})")
    return line


def where_text(item: Interruption) -> str:
    """" on gpu3", or " on gpu3 (+2 peers)" when other hosts saw the same failure."""
    if not item.hosts:
        return ""
    peers = len(item.hosts) - 1
    return f" on {item.hosts[0]}" + (f" (+{peers} peer{'s' if peers > 1 else ''})"
                                     if peers else "")


def log_markup(items: tuple[Interruption, ...], state: str = "") -> Content:
    if not items:
        return fmt.own_markup("interruptions: [$success]none[/]")
    newest = sorted(items, key=lambda i: i.detected_at, reverse=True)[:SHOWN]
    more = len(items) - len(newest)
    lines = [Content(f"interruptions: {len(items)}"
                     + (f" ({more} older not shown)" if more else ""))]
    lines += [interruption_line(item, n == 0, state) for n, item in enumerate(newest)]
    return Content("\n").join(lines)


class InterruptionLog(Static):
    """Interruptions plus the checkpoint-interval advice they feed (Young/Daly)."""

    # Repainted by `update_text` when the text changes, not on every new value.
    interruptions: reactive[tuple[Interruption, ...]] = reactive((), repaint=False)
    advice: reactive[str | None] = reactive(None, repaint=False)
    job_state: reactive[str] = reactive("", repaint=False)  # whether the newest may recover
    budget: reactive[str | None] = reactive(None, repaint=False)  # restarts used and left

    def _render_log(self) -> None:
        text = log_markup(self.interruptions, self.job_state)
        if self.budget:
            text += fmt.markup("\n[dim]restart budget:[/] $budget", budget=self.budget)
        if self.advice:
            text += fmt.markup("\n[dim]checkpoints:[/] $advice", advice=self.advice)
        update_text(self, text)

    def watch_budget(self, budget: str | None) -> None:
        self._render_log()

    def watch_interruptions(self, items: tuple[Interruption, ...]) -> None:
        self._render_log()

    def watch_advice(self, advice: str | None) -> None:
        self._render_log()

    def watch_job_state(self, state: str) -> None:
        self._render_log()
