"""Health: is it well? Hosts × GPUs, links, disk and network, and interruptions."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content

from cockpit.analysis.text import counted
from cockpit.snapshot import Snapshot
from cockpit.ui.widgets.gpu_grid import GpuGrid, host_problem
from cockpit.ui.widgets.interruption_log import InterruptionLog
from cockpit.ui.widgets.pane import Pane
from cockpit.ui.widgets.sim_badge import SimBadge


class HealthPane(Pane):
    TITLE = "Health"
    NUMBER = 4

    def compose_body(self) -> ComposeResult:
        yield SimBadge(id="sim-badge")
        with VerticalScroll(id="health-scroll"):
            yield GpuGrid(id="gpu-grid")
            yield InterruptionLog(id="interruptions")

    def show(self, snapshot: Snapshot) -> None:
        health = snapshot.health
        self.query_one(SimBadge).simulated = health.simulated
        self.query_one(GpuGrid).hosts = health.hosts
        log = self.query_one(InterruptionLog)
        log.interruptions = health.interruptions
        log.advice = health.checkpoint_advice
        log.job_state = snapshot.progress.state

    def summary(self, snapshot: Snapshot) -> Content:
        health = snapshot.health
        gpus = [c for h in health.hosts for c in h.gpus]
        online = sum(1 for c in gpus if c.online)
        bad = sum(1 for h in health.hosts if host_problem(h) == "error")
        n = len(health.hosts)
        line = f"{counted(n, 'host')} · GPUs {online}/{len(gpus)} online"
        line += f" · [$error]{counted(bad, 'host')} failing[/]" if bad else " · [$success]ok[/]"
        if health.interruptions:
            line += f" · {counted(len(health.interruptions), 'interruption')}"
        if health.simulated:
            line += " · [$warning]SIM[/]"
        return Content.from_markup(line)  # counts and the cockpit's words only
