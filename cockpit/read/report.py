"""The four instruments of a recording, headless: text, Markdown or JSON.

For SSH-only sessions and CI: `cockpit report FILE` prints what the cockpit's main
screen shows (progress, effect, efficiency, health), then alerts, interruptions and
checkpoint-interval advice, all at the end of the recording or at `until_ts`.

JSON form (stable; `report_version` changes when a key is removed or changes meaning,
keys may be added):

    report_version  int (1)
    recording       str — the file
    at, first_ts, last_ts   float | null — epoch seconds (report instant, recording span)
    job             str | null — the job reported (`--job`, else the one the screen shows)
    jobs            [str] — every job in the recording, in order of first appearance
    run             {total_steps, total_epochs, total_samples, total_tokens, world_size,
                     seed, data_version, git_commit, flops_per_step, peak_flops, stages,
                     tags, config, started (the first launch), run_started (the current
                     run: the newest start, a recovery, resume or relaunch), changes:
                     [{field, old, new, ts, host}] (a git
                     commit, data version or seed declared again with another value),
                     forked_from: {job, step} | null (a fork: its parent and the step of
                     the parent's checkpoint it started from)}
    progress        {state, stage, epoch, step, total_steps, percent, samples, tokens,
                     steps_per_second, eta_seconds, eta_low, eta_high, eta_note,
                     since_last_step, stalled, stall_cause, stall_detail,
                     resume_step (of a paused job: the checkpoint step a resume starts from)}
    effect          {last_loss, last_val_loss, best_val_step, best_val_loss,
                     divergence_step, spike_steps, nonfinite_steps (the first 1000),
                     nonfinite_count, nonfinite_last, last_loss_scale,
                     markers: [{step, kind, text, why}] (adjustments and restarts; why:
                     of a restart, "resume after a pause", "recovery from CAUSE",
                     "fork of PARENT", "relaunch", or null when not journaled),
                     train_loss: {step, loss, ema}, val_loss: {step, loss},
                     last_lr (the reference rank's newest LR), lr_scale (the operator's
                     scale in force, as text; null: never set), lr: {step, lr},
                     lr_changes: [{step, text, before, after}] (each acknowledged
                     lr_scale: the LR recorded at or before its step, and the first
                     recorded after it)}
    efficiency      {gpu_busy, samples_per_s, tokens_per_s, data_wait_pct, comm_pct, mfu,
                     step_time_median, step_time_spread,
                     slowest_ranks: [{rank, host, step_time (its own: less the
                     communication wait), wall_time (the wait included), data_share,
                     comm_share (0..1 of its step time), behind (its own time over the
                     fastest rank's, less 1)}] (up to three, each over 2 % behind the
                     fastest rank's own time: none where the ranks are even),
                     ranks: [the same for every rank, slowest own time first, at most
                     64], rank_count (how many ranks there are), note}
    health          {simulated, restart_budget (text: restarts used and left, job-wide),
                     hosts: [{host, state, gpu_state, gpus_online, gpus_total,
                     cpu, mem_used, mem_total, disk_used, disk_total, net_rx, net_tx,
                     last_seen, verdict, cause, gpus: [{index, name, online, simulated,
                     util, temp, power, power_limit, mem_used, mem_total, ecc_unc, xid,
                     throttle, xid_count, xid_earlier (XIDs before the current run began),
                     xid_codes, xid_earlier_last, ecc_lifetime (NVML's aggregate
                     uncorrectable count), xid_watched (whether its XIDs reach the agent;
                     null where its hello does not say), verdict}]}]} — verdict: the
                     state the screen shows (`cockpit.analysis.gpu_state`: offline, XID,
                     ECC, throttled, hot, stale, idle, ok); a host's is its worst GPU's or
                     its link's
    interruptions   [{cause, detected_at, recovered_in, steps_lost, restart_count, evidence,
                      hosts, failed_restarts, ended_by, detection_latency}] — one per
                      failure: the host that failed first, then the peers that saw it
                      fail; detection_latency: s from the failure to detected_at (a hang
                      is seen only once its silence outlasts the limit); failed_restarts: the
                      causes of restarts that died before their first step; ended_by: of
                      one not recovered but over, "pause", "stop", "launch", "resume",
                      "relaunch" (the operator's) or "peer" (another host's part ended)
    alerts          [{ts, kind, severity, code, where, what, hint, state, last_seen}]
                    (ts: first seen; state: active, resolved or acknowledged)
    checkpoint      {interval_s, cost_s, mtbf_s, current_interval_s, mtbf_is_lower_bound,
                     advice}
    slurm           null, or of a job that went through Slurm: {current, submissions:
                    [{job_id, state, submitted, started, ended, partition, nodes, reason,
                    estimate, queue_wait, elapsed, exit_code, exit_source (scontrol,
                    sacct, jobcomp or none), resume, exclude, requeues}], queue_wait_s,
                    causes: [{ts, job_id, kind, cause, msg}]}

Percentages are 0..100 except `mfu` (0..1); times in seconds; sizes in bytes; null = n/a.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent.wire.events import FORK, RECOVERY, RELAUNCH, RESUME
from cockpit.analysis.checkpoint_interval import CheckpointAdvice, advise
from cockpit.analysis.gpu_state import gpu_states, gpus_online, host_cause, host_state
from cockpit.analysis.lifecycle import current_run_started, process_starts
from cockpit.analysis.markers import RESTART
from cockpit.analysis.text import (
    json_printable,
    printable,
)
from cockpit.errors import CockpitError
from cockpit.read.opened import reading
from cockpit.read.progress import RUNNING_KINDS, observed_seconds
from cockpit.read.report_format import FORMATS, render_sections
from cockpit.read.report_text import sections, sparkline, title
from cockpit.read.slurm_state import slurm_summary
from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot
from cockpit.snapshot import Snapshot
from cockpit.store.database import Store
from cockpit.store.queries import StoreReader
from cockpit.store.step_time import step_ts

REPORT_VERSION = 1
# Agent events that say why a job restarted from a checkpoint (`_restart_causes`).
RESTART_KINDS = (RESUME, RECOVERY, FORK, RELAUNCH)


def render_report(path: str | Path, fmt: str = "text", until_ts: float | None = None,
                  job: str | None = None) -> str:
    """The report of `job` (None: the job the cockpit's screen would show at the end: of
    a job and its forks training side by side, the one started last)."""
    if fmt not in FORMATS:
        raise CockpitError(f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}")
    return format_report(report_data(path, until_ts, job), fmt)


def report_data(path: str | Path, until_ts: float | None = None, job: str | None = None,
                *, name: str | None = None, at_step: int | None = None,
                at_offset: float | None = None) -> dict[str, Any]:
    """The report's data (its JSON form) of the recording at `path`, called `name` in
    it (a live cockpit's copy is named for the recording it copies). `at_step`: as of
    when `job` (else the job that trained last) first reached that step; `at_offset`:
    as of that many seconds after the recording's first record (`cockpit report --at`)."""
    with reading(path) as (store, reader):
        if at_step is not None:
            until_ts = _step_instant(store, reader, job, at_step)
        elif at_offset is not None:
            span = reader.time_range()
            if not span:
                raise CockpitError(f"{name or path} holds no records: no +{at_offset:g} s")
            until_ts = span[0] + at_offset
        return collect(reader, name or str(path), until_ts, job)


def _step_instant(store: Store, reader: StoreReader, job: str | None, step: int) -> float:
    job = job if job is not None else reader.current_job()
    if job is None:
        raise CockpitError(f"{store.path.name} holds no training step: no step {step:,}")
    ts, top = step_ts(store, job, step)
    if ts is None:
        reached = "no step" if top is None else f"step {top:,} at most"
        raise CockpitError(f"job {printable(job)} never reached step {step:,} in this "
                           f"recording ({reached})")
    return ts


def format_report(data: dict[str, Any], fmt: str = "text") -> str:
    """The report `data` (`report_data`) as text, Markdown or JSON."""
    if fmt not in FORMATS:
        raise CockpitError(f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json_printable(json.dumps(_json_safe(data), indent=2, ensure_ascii=False)) + "\n"
    return render_sections(sections(data), markdown=fmt == "markdown", title=title(data))


def collect(reader: StoreReader, recording: str, until_ts: float | None,
            job: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The report's data: the JSON form, from which text and Markdown are drawn too."""
    span = reader.time_range()
    jobs = reader.jobs(until_ts=until_ts)
    if job is not None and job not in jobs:
        # The jobs are the recording's names (the hosts'): shown as text.
        raise CockpitError(f"{printable(Path(recording).name)} has no job {job!r}; its jobs: "
                           f"{printable(', '.join(jobs) or 'none')}")  # fmt: skip
    # The screen's resolution: its spike and divergence findings are the report's.
    snap = build_snapshot(reader, until_ts=until_ts, label="REPORT", buckets=SNAPSHOT_BUCKETS,
                          job=job)
    run = reader.run_info(snap.job, until_ts=until_ts) if snap.job else {}
    lifecycle = reader.rare_events(RUNNING_KINDS, snap.job, until_ts) if snap.job else []
    run_started = current_run_started(e for e in lifecycle if e.get("job") == snap.job)
    first = span[0] if span else None
    checkpoints = reader.checkpoint_costs(snap.job, until_ts=until_ts) if snap.job else []
    advice = advise(
        checkpoint_seconds=[c["seconds"] for c in checkpoints],
        checkpoint_ts=[c["ts"] for c in checkpoints],
        interruptions=len(snap.health.interruptions),
        observed_seconds=observed_seconds(
            lifecycle, snap.job or "", run.get("started") or first or snap.ts, snap.ts),
        starts=process_starts(lifecycle, snap.job),
    )
    return {
        "report_version": REPORT_VERSION,
        "recording": recording,
        "at": snap.ts if span else None,  # an empty recording has no instant
        "first_ts": first,
        "last_ts": span[1] if span else None,
        "job": snap.job,
        "jobs": jobs,
        "run": {**{k: run.get(k) for k in (
            "total_steps", "total_epochs", "total_samples", "total_tokens", "world_size",
            "seed", "data_version", "git_commit", "flops_per_step", "peak_flops", "stages",
            "tags", "config", "started", "changes", "forked_from")},
            # The run the figures are of, as run info shows it (details.RunInfo).
            "run_started": run_started if run_started is not None else run.get("started")},
        "progress": _progress(snap),
        "effect": _effect(snap, _restart_causes(
            reader.rare_events(RESTART_KINDS, snap.job, until_ts) if snap.job else [],
            snap.job)),
        "efficiency": _efficiency(snap),
        "health": _health(snap),
        "interruptions": [asdict(i) for i in snap.health.interruptions],
        "alerts": [asdict(a) for a in snap.alerts],
        "checkpoint": _checkpoint(advice),
        # A job that went through Slurm: its submissions, queue waits and exit states.
        "slurm": slurm_summary(reader, snap.job, until_ts),
    }


def _progress(snap: Snapshot) -> dict[str, Any]:
    row = asdict(snap.progress)
    if row["percent"] is not None:  # a ratio times 100: 32.88, not 32.879999999999995
        row["percent"] = round(row["percent"], 6)
    return row


def _restart_causes(events: Sequence[dict[str, Any]], job: str | None) -> dict[int, str]:
    """Why the job restarted from each checkpoint step, as the agent journaled it: an
    operator's resume after a pause, a crash's recovery and a fork's start all mark
    the chart alike, and a report that calls each a "restart" hides which was which."""
    causes: dict[int, str] = {}
    for e in events:
        if e.get("job") != job:
            continue
        data = e["data"] if isinstance(e.get("data"), dict) else {}
        kind = e.get("kind")
        if kind == RESUME:
            step, why = data.get("step", e.get("step")), "resume after a pause"
        elif kind == RECOVERY:
            cause = data.get("cause") or "a failure"
            step, why = data.get("checkpoint_step"), f"recovery from {cause}"
        elif kind == FORK:
            step, why = data.get("parent_step", e.get("step")), f"fork of {data.get('parent')}"
        elif kind == RELAUNCH and not data.get("excluded"):
            step, why = data.get("step"), "relaunch"
        else:
            continue
        if isinstance(step, int) and not isinstance(step, bool):
            causes[step] = why
    return causes


def _effect(snap: Snapshot, causes: dict[int, str]) -> dict[str, Any]:
    e = snap.effect
    return {
        "last_loss": e.last_loss, "last_val_loss": e.last_val_loss,
        "best_val_step": e.best_val_step, "best_val_loss": e.best_val_loss,
        "divergence_step": e.divergence_step, "spike_steps": list(e.spike_steps),
        "nonfinite_steps": list(e.nonfinite_steps), "nonfinite_count": e.nonfinite_count,
        "nonfinite_last": e.nonfinite_last, "last_loss_scale": e.last_loss_scale,
        "train_loss": {"step": _steps(e.train_loss.x), "loss": list(e.train_loss.last),
                       "ema": list(e.train_loss_ema.last)},
        "val_loss": {"step": _steps(e.val_loss.x), "loss": list(e.val_loss.last)},
        "last_lr": e.last_lr, "lr_scale": e.lr_scale,
        "lr": {"step": _steps(e.lr.x), "lr": list(e.lr.last)},
        "lr_changes": [asdict(c) for c in e.lr_changes],
        "markers": [{**asdict(m), "why": causes.get(m.step) if m.kind == RESTART else None}
                    for m in e.markers],
    }


def _efficiency(snap: Snapshot) -> dict[str, Any]:
    f = snap.efficiency
    return {
        "gpu_busy": f.gpu_busy, "samples_per_s": f.samples_per_s,
        "tokens_per_s": f.tokens_per_s, "data_wait_pct": f.data_wait_pct,
        "comm_pct": f.comm_pct, "mfu": f.mfu, "step_time_median": f.step_time_median,
        "step_time_spread": f.step_time_spread,
        "slowest_ranks": [asdict(r) for r in f.slowest_ranks],
        "ranks": [asdict(r) for r in f.ranks], "rank_count": f.rank_count,
        "note": f.note,
    }


def _health(snap: Snapshot) -> dict[str, Any]:
    hosts = []
    for h in snap.health.hosts:
        row = asdict(h)
        verdicts = gpu_states(h)
        online = gpus_online(h, verdicts)
        # "online" as the screen says it: a lost host's GPUs are not, whatever the cell's
        # last sample (`gpu_state.gpus_online`).
        row["gpus"] = [{**g._asdict(), "online": on, "verdict": s.label}
                       for g, s, on in zip(h.gpus, verdicts, online, strict=True)]
        row["gpus_online"] = sum(online)
        row["gpus_total"] = len(h.gpus)
        row["verdict"] = host_state(h, verdicts).label
        row["cause"] = host_cause(h, verdicts)
        hosts.append(row)
    return {"simulated": snap.health.simulated, "hosts": hosts,
            "restart_budget": snap.health.restart_budget}


def _checkpoint(a: CheckpointAdvice) -> dict[str, Any]:
    return {"interval_s": a.interval_s, "cost_s": a.cost_s, "mtbf_s": a.mtbf_s,
            "current_interval_s": a.current_interval_s,
            "mtbf_is_lower_bound": a.mtbf_is_lower_bound, "advice": a.text}


def _steps(xs: Sequence[float]) -> list[int | float]:
    """Steps are whole numbers; the downsampled series carries them as floats."""
    return [int(x) if float(x).is_integer() else x for x in xs]


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


__all__ = ["FORMATS", "REPORT_VERSION", "collect", "render_report", "render_sections",
           "sparkline"]
