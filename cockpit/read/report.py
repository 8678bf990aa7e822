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
                     communication wait)}], note}
    health          {simulated, hosts: [{host, state, gpu_state, gpus_online, gpus_total,
                     cpu, mem_used, mem_total, disk_used, disk_total, net_rx, net_tx,
                     last_seen, verdict, cause, gpus: [{index, name, online, simulated,
                     util, temp, power, power_limit, mem_used, mem_total, ecc_unc, xid,
                     throttle, verdict}]}]} — verdict: the state the screen shows
                     (`cockpit.analysis.gpu_state`: offline, XID, ECC, throttled, hot,
                     stale, idle, ok); a host's is its worst GPU's or its link's
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
                    estimate, queue_wait, exit_code, exit_source, resume, exclude,
                    requeues}], queue_wait_s, causes: [{ts, job_id, kind, cause, msg}]}

Percentages are 0..100 except `mfu` (0..1); times in seconds; sizes in bytes; null = n/a.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cockpit.analysis.checkpoint_interval import CheckpointAdvice, advise
from cockpit.analysis.gpu_state import gpu_states, host_cause, host_state
from cockpit.analysis.lifecycle import current_run_started, process_starts
from cockpit.analysis.lr import lr_change_text, lr_text
from cockpit.analysis.text import (
    duration,
    failed_restarts_text,
    json_printable,
    printable,
    size,
    unrecovered_text,
)
from cockpit.analysis.throttle import throttle_text
from cockpit.errors import CockpitError
from cockpit.read.progress import RUNNING_KINDS, observed_seconds
from cockpit.read.report_format import ALERT_HEADER, FORMATS, Rows, Table, render_sections
from cockpit.read.slurm_state import slurm_rows, slurm_summary
from cockpit.read.source import SNAPSHOT_BUCKETS, build_snapshot
from cockpit.snapshot import LrChange, Snapshot
from cockpit.store.database import Store, StoreError
from cockpit.store.queries import StoreReader
from cockpit.store.step_time import step_ts

REPORT_VERSION = 1
SPARK_WIDTH = 60  # characters of a trend line
SPARK = "▁▂▃▄▅▆▇█"
NA = "n/a"
# Agent events that say why a job restarted from a checkpoint (`_restart_causes`).
RESTART_KINDS = ("resume", "recovery", "fork", "relaunch")


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
    try:
        store = Store(path, read_only=True)
    except StoreError as exc:
        raise CockpitError(str(exc)) from None
    try:
        reader = StoreReader(store)
        if at_step is not None:
            until_ts = _step_instant(store, reader, job, at_step)
        elif at_offset is not None:
            span = reader.time_range()
            if not span:
                raise CockpitError(f"{name or path} holds no records: no +{at_offset:g} s")
            until_ts = span[0] + at_offset
        return collect(reader, name or str(path), until_ts, job)
    except StoreError as exc:
        raise CockpitError(str(exc)) from None
    finally:
        store.close()


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
    return _render(_sections(data), markdown=fmt == "markdown", title=_title(data))


def collect(reader: StoreReader, recording: str, until_ts: float | None,
            job: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The report's data: the JSON form, from which text and Markdown are drawn too."""
    span = reader.time_range()
    jobs = reader.jobs(until_ts=until_ts)
    if job is not None and job not in jobs:
        raise CockpitError(f"{Path(recording).name} has no job {job!r}; its jobs: "
                           f"{', '.join(jobs) or 'none'}")  # fmt: skip
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
        if kind == "resume":
            step, why = data.get("step", e.get("step")), "resume after a pause"
        elif kind == "recovery":
            cause = data.get("cause") or "a failure"
            step, why = data.get("checkpoint_step"), f"recovery from {cause}"
        elif kind == "fork":
            step, why = data.get("parent_step", e.get("step")), f"fork of {data.get('parent')}"
        elif kind == "relaunch" and not data.get("excluded"):
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
        "markers": [{**asdict(m), "why": causes.get(m.step) if m.kind == "restart" else None}
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
        "note": f.note,
    }


def _health(snap: Snapshot) -> dict[str, Any]:
    hosts = []
    for h in snap.health.hosts:
        row = asdict(h)
        states = gpu_states(h)
        row["gpus"] = [{**asdict(g), "verdict": s.label}
                       for g, s in zip(h.gpus, states, strict=True)]
        row["gpus_online"] = sum(1 for g in h.gpus if g.online)
        row["gpus_total"] = len(h.gpus)
        row["verdict"] = host_state(h, states).label
        row["cause"] = host_cause(h, states)
        hosts.append(row)
    return {"simulated": snap.health.simulated, "hosts": hosts}


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


# --- text and Markdown ---------------------------------------------------------------



def _when(ts: float | None) -> str:
    if ts is None:
        return NA
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(value: float | int | None, spec: str = ",.0f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    return f"{value:{spec}}{unit}"


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return ""
    if len(vals) > width:  # every k-th point, the newest kept
        stride = math.ceil(len(vals) / width)
        vals = vals[::-1][::stride][::-1]
    lo, hi = min(vals), max(vals)
    scale = (len(SPARK) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(SPARK[round((v - lo) * scale)] for v in vals)


def _unrecovered(item: dict[str, Any], d: dict[str, Any]) -> str:
    """Only the newest interruption of a job still recovering may yet recover."""
    newest = max(d["interruptions"], key=lambda i: i["detected_at"])
    return unrecovered_text(item.get("ended_by"), item is newest, d["progress"]["state"])


def _title(d: dict[str, Any]) -> str:
    return f"Training report: {d['job'] or 'no job'} ({Path(d['recording']).name})"


def _idle_note(state: str) -> str:
    """GPU busy is read at the report's instant: after the job ended its GPUs idle."""
    return {"exited": " (now: the job has exited)", "finished": " (now: the job has finished)",
            "paused": " (now: the job is paused)", "stopped": " (now: the job was stopped)",
            "failed": " (now: the job failed)"}.get(state, "")


def _nonfinite_text(e: dict[str, Any]) -> str:
    steps, count, last = e["nonfinite_steps"], e["nonfinite_count"], e["nonfinite_last"]
    if not steps:
        return "none"
    shown = ", ".join(f"{s:,}" for s in steps[:20])
    if count <= 20:
        return shown
    return f"{count:,} steps, the newest {last:,}; first: {shown}, …"


def _sections(d: dict[str, Any]) -> list[tuple[str, Rows, list[Table]]]:
    p, e, f, h = d["progress"], d["effect"], d["efficiency"], d["health"]
    span = NA
    if d["first_ts"] is not None and d["last_ts"] is not None:
        span = (f"{_when(d['first_ts'])} to {_when(d['last_ts'])} "
                f"({duration(d['last_ts'] - d['first_ts'])})")
    overview: Rows = [("report at", _when(d["at"])), ("recording", span)]
    others = [j for j in d["jobs"] if j != d["job"]]
    if others:
        overview.append(("other jobs", ", ".join(others) + " (report one with --job NAME)"))
    run = d["run"]
    if run.get("run_started") is not None:
        overview.append(("run started", _when(run["run_started"])))
    if run.get("started") is not None and run["started"] != run.get("run_started"):
        overview.append(("first launch", _when(run["started"])))
    parent = run.get("forked_from")
    if parent:
        overview.append(("forked from", f"{parent['job']} at step {_num(parent['step'])}"))
    for key in ("world_size", "seed", "data_version", "git_commit"):
        if run.get(key) is not None:
            overview.append((key.replace("_", " "), str(run[key])))
    for change in run.get("changes") or ():
        overview.append((f"{change['field'].replace('_', ' ')} changed",
                         f"{change['old']} → {change['new']} at {_when(change['ts'])}"))
    if run.get("tags"):
        overview.append(("tags", ", ".join(map(str, run["tags"]))))

    step = _num(p["step"]) + (f" / {_num(p['total_steps'])}" if p["total_steps"] else "")
    if p["percent"] is not None:
        step += f" ({p['percent']:.1f}%)"
    eta = NA if p["eta_note"] is None else f"{NA} (job {p['eta_note']})"
    if p["resume_step"] is not None:
        eta += f"; a resume starts from the checkpoint of step {p['resume_step']:,}"
    if p["eta_seconds"] is not None:
        eta = (f"{duration(p['eta_seconds'])} (estimate; {duration(p['eta_low'])} to "
               f"{duration(p['eta_high'])})")
    stall = "no"
    if p["stalled"]:
        stall = f"YES: {p['stall_cause'] or 'cause unknown'}: {p['stall_detail'] or ''}".strip()
    progress: Rows = [
        ("state", p["state"]), ("stage", p["stage"] or NA), ("epoch", _num(p["epoch"], ".2f")),
        ("step", step), ("samples seen", _num(p["samples"])),
        ("tokens seen", _num(p["tokens"])),
        ("speed", _num(p["steps_per_second"], ".3g", " steps/s")), ("ETA", eta),
        ("last step", duration(p["since_last_step"]) + " ago"
         if p["since_last_step"] is not None else NA),
        ("stalled", stall),
    ]
    ema = [v for v in e["train_loss"]["ema"] if v is not None]
    effect: Rows = [
        ("train loss", _num(e["last_loss"], ".4g") + (f" (smoothed {ema[-1]:.4g})" if ema else "")),
        ("train trend", sparkline(e["train_loss"]["ema"]) or NA),
        ("val loss", _num(e["last_val_loss"], ".4g")),
        ("best val", f"{_num(e['best_val_loss'], '.4g')} at step {_num(e['best_val_step'])}"
         if e["best_val_step"] is not None else NA),
        ("val trend", sparkline(e["val_loss"]["loss"]) or NA),
        ("divergence", f"from step {e['divergence_step']:,} (val stopped improving while "
         "train kept improving)" if e["divergence_step"] is not None else "none"),
        ("loss spikes", ", ".join(f"{s:,}" for s in e["spike_steps"]) or "none"),
        ("NaN/Inf steps", _nonfinite_text(e)),
        ("loss scale", _num(e["last_loss_scale"], ".6g")),
        ("LR", lr_text(e["last_lr"], e["lr_scale"]).removeprefix("LR ")),
        ("LR trend", sparkline(e["lr"]["lr"]) or NA),
        ("LR changes", "; ".join(lr_change_text(LrChange(**c)) for c in e["lr_changes"])
         or "none"),
        ("changes", "; ".join(f"{m['text'] if m['kind'] == 'adjust' else 'restart'} at step "
                              f"{m['step']:,}" + (f" ({m['why']})" if m.get("why") else "")
                              for m in e["markers"]) or "none"),
    ]
    slow = ", ".join(f"rank {r['rank']} ({r['host']}) {r['step_time']:.3g}s"
                     for r in f["slowest_ranks"]) or NA
    efficiency: Rows = [
        ("GPU busy", _num(f["gpu_busy"], ".0f", "%") + _idle_note(p["state"])),
        ("samples/s", _num(f["samples_per_s"], ",.1f")),
        ("tokens/s", _num(f["tokens_per_s"], ",.0f")),
        ("data wait", _num(f["data_wait_pct"], ".1f", "%")),
        ("communication", _num(f["comm_pct"], ".1f", "%")),
        ("MFU", _num(None if f["mfu"] is None else 100 * f["mfu"], ".1f", "%")),
        ("step time", _num(f["step_time_median"], ".3g", " s (median)")),
        ("rank spread", _num(None if f["step_time_spread"] is None
                             else 100 * f["step_time_spread"], ".0f", "%")),
        ("slowest ranks", slow + (" (own time: step time less comm wait)"
                                  if f["slowest_ranks"] else "")),
        *([("note", f["note"])] if f["note"] else []),
    ]
    host_table: Table = (
        ("host", "link", "GPUs", "health", "GPU state", "CPU", "memory", "disk",
         "last seen"),
        [(x["host"], x["state"], f"{x['gpus_online']}/{x['gpus_total']}", x["cause"],
          x["gpu_state"],
          _num(x["cpu"], ".0f", "%"), f"{size(x['mem_used'], ' ')} / {size(x['mem_total'], ' ')}",
          f"{size(x['disk_used'], ' ')} / {size(x['disk_total'], ' ')}", _when(x["last_seen"]))
         for x in h["hosts"]],
    )
    gpu_table: Table = (
        ("host", "gpu", "state", "util", "temp", "power", "memory", "ECC unc", "XID",
         "throttle"),
        [(x["host"], str(g["index"]) + (" SIM" if g["simulated"] else ""), g["verdict"],
          _num(g["util"], ".0f", "%"), _num(g["temp"], ".0f", "°C"),
          f"{_num(g['power'], '.0f')} / {_num(g['power_limit'], '.0f', ' W')}",
          f"{size(g['mem_used'], ' ')} / {size(g['mem_total'], ' ')}", _num(g["ecc_unc"]),
          _num(g["xid"], "d"), throttle_text(g["throttle"]))
         for x in h["hosts"] for g in x["gpus"]],
    )
    health_rows: Rows = [("simulated GPUs", "yes (SIM)" if h["simulated"] else "no")]
    interruptions: Table = (
        ("detected", "after failure", "cause", "hosts", "down (failure to next step)",
         "steps lost", "restarts"),
        [(_when(i["detected_at"]), duration(i["detection_latency"]), i["cause"],
          ", ".join(i["hosts"]) or NA,
          duration(i["recovered_in"]) if i["recovered_in"] is not None
          else _unrecovered(i, d),
          _num(i["steps_lost"]), _num(i["restart_count"]) + (
              f" ({failed_restarts_text(i['failed_restarts'])})"
              if i.get("failed_restarts") else ""))
         for i in d["interruptions"]],
    )
    alerts: Table = (
        ALERT_HEADER,
        # A resolved (over) or acknowledged alert says so beside its severity.
        [(a["severity"] + ("" if a.get("state", "active") == "active" else f" ({a['state']})"),
          a["kind"], a["code"], a["where"], a["what"], a["hint"])
         for a in d["alerts"]],
    )
    return [
        ("Overview", overview, []),
        ("Progress", progress, []),
        ("Effect", effect, []),
        ("Efficiency", efficiency, []),
        ("Health", health_rows, [host_table, gpu_table]),
        ("Interruptions", [] if d["interruptions"] else [("interruptions", "none")],
         [interruptions] if d["interruptions"] else []),
        ("Alerts", [] if d["alerts"] else [("alerts", "none")],
         [alerts] if d["alerts"] else []),
        ("Checkpoints", [("advice", d["checkpoint"]["advice"])], []),
        *([("Slurm", slurm_rows(d["slurm"]), [])] if d.get("slurm") else []),
    ]


_render = render_sections

__all__ = ["FORMATS", "REPORT_VERSION", "collect", "render_report", "render_sections",
           "sparkline"]
