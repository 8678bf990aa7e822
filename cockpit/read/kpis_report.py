"""`cockpit report --kpis`: the KPIs of every job of one recording or of a directory.

Reads each job's lifecycle events, interruptions, step totals and evaluations through
the store's read API and hands them to `cockpit.analysis.kpis`; prints a table per job
and, over several, the totals (text, Markdown or JSON). `job_kpis_of` is also what
the run-info drill-down shows (`cockpit.read.details.run_info`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent.wire import states
from agent.wire.events import (
    CONTROL_ACK,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RESUME,
    SLURM_RUNNING,
    SLURM_SUBMITTED,
)
from cockpit.analysis.incidents import merge_incidents
from cockpit.analysis.kpis import LOSS_CAUSES, JobKpis, KpiTotals, StepTotals, job_kpis, totals
from cockpit.analysis.text import duration, json_printable, printable
from cockpit.errors import CockpitError
from cockpit.read.opened import reading
from cockpit.read.report_format import FORMATS, Rows, Table, render_sections
from cockpit.store.queries import StoreReader

KPIS_VERSION = 1
# Events the accounting reads (rare: starts, exits, pauses, launches; not steps).
KPI_EVENT_KINDS = (JOB_STARTED, JOB_EXITED, PAUSE, RESUME, CONTROL_ACK, SLURM_SUBMITTED,
                   SLURM_RUNNING)
CAUSE_NAMES = {
    "interruption": "interruptions (failure to next step)", "pause": "pauses",
    "stopped": "stopped (no process)", "startup": "start-up (start to first step)",
    "data_wait": "data wait", "checkpoint": "checkpoint stalls",
    "recomputed": "recomputed steps", "other": "other (shutdown, gaps)",
}


def allocated_gpus(reader: StoreReader, job: str, info: dict[str, Any],
                   until_ts: float | None) -> tuple[int, str]:
    """GPUs the job holds: its world size (a rank per GPU), at most the GPUs its hosts
    have (hello inventory); either alone when only one is known; else 1."""
    world = info.get("world_size")
    world = world if isinstance(world, int) and not isinstance(world, bool) and world > 0 \
        else None
    hosts = set(reader.job_hosts(job, until_ts=until_ts))
    inventory = sum(len(h["gpus"]) for h in reader.hosts(until_ts=until_ts)
                    if h["host"] in hosts)
    if world is not None and inventory > 0:
        return min(world, inventory), "world size" if world <= inventory else "inventory"
    if world is not None:
        return world, "world size"
    if inventory > 0:
        return inventory, "inventory"
    return 1, "assumed 1"


def job_kpis_of(reader: StoreReader, job: str, *, until_ts: float | None = None,
                target_loss: float | None = None, recording: str | None = None) -> JobKpis:
    info = reader.run_info(job, until_ts=until_ts)
    events = reader.rare_events(KPI_EVENT_KINDS, job, until_ts)
    raw = reader.step_totals(job, until_ts=until_ts)
    steps = StepTotals(
        records=raw["records"], first_ts=raw["first_ts"], last_ts=raw["last_ts"],
        last_step=raw["last_step"], step_time=raw["step_time"], data_time=raw["data_time"],
        ckpt_time=raw["ckpt_time"], redo_records=raw["redo_records"],
        redo_steps=raw["redo_steps"], redo_time=raw["redo_time"])
    starts = [float(e["ts"]) for e in events
              if e.get("job") == job and e.get("kind") in (JOB_STARTED, JOB_EXITED)]
    span = reader.time_range()
    end = span[1] if span else None
    if until_ts is not None and end is not None:
        end = min(end, until_ts)
    gpus, gpus_from = allocated_gpus(reader, job, info, until_ts)
    checkpoints = reader.checkpoint_costs(job, until_ts=until_ts)
    evals = reader.eval_losses(job, until_ts=until_ts)
    return job_kpis(
        # One failure seen by several hosts is one interruption (`merge_incidents`).
        job, events=events,
        interruptions=merge_incidents(reader.interruptions(job, until_ts=until_ts)),
        steps=steps, first_steps=reader.first_steps_after(job, starts, until_ts=until_ts),
        gpus=gpus, gpus_from=gpus_from, recording_end=end,
        first_declared=reader.job_started_ts(job, until_ts=until_ts),
        checkpoint_seconds=[c["seconds"] for c in checkpoints],
        evals=[(ts, loss) for ts, _seq, loss in evals.values()],
        target_loss=target_loss, recording=recording,
    )


# The run-info drill-down recomputes a job's KPIs when the recording has moved on this
# many seconds (they sum the job's whole history: not at every refresh).
KPI_REFRESH_S = 30.0


def kpi_summary(reader: StoreReader, job: str, until_ts: float | None = None
                ) -> dict[str, str]:
    """The KPI rows of `job` for the run-info drill-down, remembered per job until the
    recording's newest record moves `KPI_REFRESH_S` on."""
    newest = reader.frontier(until_ts=until_ts)
    key = (job, until_ts is None, None if newest is None else int(newest // KPI_REFRESH_S))
    return reader.memo("kpi_summary", key,
                       lambda: dict(kpi_rows(job_kpis_of(reader, job, until_ts=until_ts))))


def recordings_in(path: Path) -> list[Path]:
    """`path` itself, or every `*.duckdb` in a directory (not its subdirectories)."""
    if path.is_dir():
        found = sorted(p for p in path.glob("*.duckdb") if p.is_file())
        if not found:
            raise CockpitError(f"{path} holds no *.duckdb recording")
        return found
    if not path.is_file():
        raise CockpitError(f"{path}: no such recording (expected a DuckDB file or a "
                           "directory of them)")
    return [path]


def collect_kpis(path: Path, *, job: str | None = None,
                 target_loss: float | None = None) -> list[JobKpis]:
    """The KPIs of every job (or `job`) of every recording at `path`."""
    out: list[JobKpis] = []
    for rec in recordings_in(path):
        with reading(rec, str(rec)) as (_store, reader):
            jobs = reader.jobs()
            if job is not None and job not in jobs:
                if len(recordings_in(path)) == 1:
                    # The jobs are the recording's names (the hosts'): shown as text.
                    raise CockpitError(f"{printable(rec.name)} has no job {job!r}; its "
                                       f"jobs: {printable(', '.join(jobs) or 'none')}")
                continue
            for name in [job] if job is not None else jobs:
                out.append(job_kpis_of(reader, name, target_loss=target_loss,
                                       recording=rec.name))
    return out


# --- rendering ------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _hours(value: float) -> str:
    return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"


def kpi_rows(k: JobKpis) -> list[tuple[str, str]]:
    """One job's KPIs as (name, value) rows: what the report and run info show."""
    state = states.RUNNING if k.running else states.FINISHED if k.finished else "ended"
    rows = [
        ("state", state),
        ("GPUs", f"{k.gpus} ({k.gpus_from})"),
        ("allocated", f"{duration(k.span_s)} x {k.gpus} = {_hours(k.gpu_hours)} GPU-h"),
        ("utilization", f"{_pct(k.utilization)} productive "
                        f"({_hours(k.gpus * k.productive_s / 3600)} GPU-h)"),
    ]
    for cause in LOSS_CAUSES:
        seconds = k.lost_s.get(cause, 0.0)
        if seconds > 0:
            share = seconds / k.span_s if k.span_s > 0 else None
            extra = (f", {k.steps_recomputed:,} steps" if cause == "recomputed"
                     and k.steps_recomputed else "")
            rows.append((f"lost: {CAUSE_NAMES[cause]}",
                         f"{duration(seconds)} ({_pct(share)}{extra})"))
    rows += [
        ("interruptions", f"{k.interruptions} ({k.recovered} recovered)"),
        ("MTTR", "n/a" if k.mttr_s is None else
         f"{k.mttr_s:.3g} s (each: {', '.join(f'{r:.3g}' for r in k.recovery_s)}; "
         f"trend {k.mttr_trend})"),
        ("checkpoint overhead", _pct(k.checkpoint_share)),
        ("turnaround", "n/a" if k.turnaround_s is None else
         f"{duration(k.turnaround_s)} ({'submit' if k.submitted is not None else 'launch'}"
         f" to step {k.last_step:,})"
         if k.last_step is not None else duration(k.turnaround_s)),
    ]
    if k.queue_wait_s is not None:
        rows.append(("queue wait", f"{duration(k.queue_wait_s)} (in the turnaround; no "
                                   "GPU time)"))
    if k.target_loss is not None:
        rows.append((f"to val loss <= {k.target_loss:g}",
                     duration(k.turnaround_to_target_s) if k.turnaround_to_target_s
                     is not None else "not reached"))
    rows.append(("GPU-h per week", ", ".join(f"{w} {_hours(h)}"
                                             for w, h in k.gpu_hours_by_week.items()) or "n/a"))
    return rows


def _totals_table(jobs: Sequence[JobKpis], t: KpiTotals
                  ) -> tuple[list[tuple[str, str]], list[tuple[tuple[str, ...], list]]]:
    header = ("recording", "job", "GPU-h", "utilization", "interruptions", "MTTR",
              "checkpoint", "turnaround")
    body = [(k.recording or "", k.job, _hours(k.gpu_hours), _pct(k.utilization),
             str(k.interruptions), "n/a" if k.mttr_s is None else f"{k.mttr_s:.3g} s",
             _pct(k.checkpoint_share), duration(k.turnaround_s)) for k in jobs]
    rows = [
        ("jobs", str(t.jobs)),
        ("GPU-hours", f"{_hours(t.gpu_hours)} ({_hours(t.productive_gpu_hours)} productive)"),
        ("utilization", _pct(t.utilization)),
        *((f"lost: {CAUSE_NAMES[c]}", f"{_hours(h)} GPU-h")
          for c, h in t.lost_gpu_hours.items() if h > 0),
        ("interruptions", f"{t.interruptions} ({t.recovered} recovered)"),
        ("MTTR", "n/a" if t.mttr_s is None else f"{t.mttr_s:.3g} s (trend {t.mttr_trend})"),
        ("checkpoint overhead", _pct(t.checkpoint_share)),
        ("GPU-h per week", ", ".join(f"{w} {_hours(h)}" for w, h in
                                     t.gpu_hours_by_week.items()) or "n/a"),
    ]
    return rows, [(header, body)]


def render_kpis(path: Path, fmt: str = "text", *, job: str | None = None,
                target_loss: float | None = None) -> str:
    # Here, not at the top: the run-info details import this module, and the report's
    # module imports those details (through the source).

    if fmt not in FORMATS:
        raise CockpitError(f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}")
    jobs = collect_kpis(path, job=job, target_loss=target_loss)
    t = totals(jobs)
    if fmt == "json":
        data = {"kpis_version": KPIS_VERSION, "path": str(path),
                "jobs": [asdict(k) for k in jobs], "totals": asdict(t)}
        return json_printable(json.dumps(data, indent=2, ensure_ascii=False)) + "\n"
    sections: list[tuple[str, Rows, list[Table]]] = [
        (f"Job {k.job} in {k.recording}", kpi_rows(k), []) for k in jobs]
    if len(jobs) > 1:
        rows, tables = _totals_table(jobs, t)
        sections.append(("Totals", rows, tables))
    if not jobs:
        sections.append(("Jobs", [("jobs", "none")], []))
    return render_sections(sections, markdown=fmt == "markdown", title=f"KPIs: {path.name}")


__all__ = ["KPIS_VERSION", "collect_kpis", "job_kpis_of", "kpi_rows", "kpi_summary",
           "recordings_in", "render_kpis"]
