"""The report's text and Markdown: its data (`cockpit.read.report.collect`, the JSON
form) laid out as titled sections of rows and tables, one section per pane of the
cockpit's main screen and then its alerts, interruptions, checkpoint advice and Slurm
account. `cockpit.read.report_format` draws the sections as text or Markdown.

Only the data dict is read here, never the store: the text and Markdown say what the
JSON form says, since they are drawn from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent.wire import states
from cockpit.analysis.lr import lr_change_text, lr_text
from cockpit.analysis.markers import ADJUST
from cockpit.analysis.text import duration, failed_restarts_text, size, unrecovered_text
from cockpit.analysis.throttle import throttle_text
from cockpit.read.report_format import ALERT_HEADER, Rows, Table
from cockpit.read.slurm_state import slurm_rows
from cockpit.snapshot import LrChange

SPARK_WIDTH = 60  # characters of a trend line
SPARK = "▁▂▃▄▅▆▇█"
NA = "n/a"


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


def title(d: dict[str, Any]) -> str:
    return f"Training report: {d['job'] or 'no job'} ({Path(d['recording']).name})"


def _idle_note(state: str) -> str:
    """GPU busy is read at the report's instant: after the job ended its GPUs idle."""
    return {states.EXITED: " (now: the job has exited)",
            states.FINISHED: " (now: the job has finished)",
            states.PAUSED: " (now: the job is paused)",
            states.STOPPED: " (now: the job was stopped)",
            states.FAILED: " (now: the job failed)"}.get(state, "")


def _nonfinite_text(e: dict[str, Any]) -> str:
    steps, count, last = e["nonfinite_steps"], e["nonfinite_count"], e["nonfinite_last"]
    if not steps:
        return "none"
    shown = ", ".join(f"{s:,}" for s in steps[:20])
    if count <= 20:
        return shown
    return f"{count:,} steps, the newest {last:,}; first: {shown}, …"


def sections(d: dict[str, Any]) -> list[tuple[str, Rows, list[Table]]]:
    """The report data `d` (`cockpit.read.report.collect`) as titled sections, in the
    order of the cockpit's panes."""
    p, h = d["progress"], d["health"]
    return [
        ("Overview", _overview(d), []),
        ("Progress", _progress(p), []),
        ("Effect", _effect(d["effect"]), []),
        ("Efficiency", _efficiency(d["efficiency"], p["state"]),
         [_rank_table(d["efficiency"])] if d["efficiency"]["ranks"] else []),
        ("Health", [("simulated GPUs", "yes (SIM)" if h["simulated"] else "no")],
         [_host_table(h), _gpu_table(h)]),
        ("Interruptions", ([] if d["interruptions"] else [("interruptions", "none")]) + (
            [("restart budget", h["restart_budget"])] if h.get("restart_budget") else []),
         [_interruptions(d)] if d["interruptions"] else []),
        ("Alerts", [] if d["alerts"] else [("alerts", "none")],
         [_alerts(d)] if d["alerts"] else []),
        ("Checkpoints", [("advice", d["checkpoint"]["advice"])], []),
        *([("Slurm", slurm_rows(d["slurm"]), [])] if d.get("slurm") else []),
    ]


def _overview(d: dict[str, Any]) -> Rows:
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
    return overview


def _progress(p: dict[str, Any]) -> Rows:
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
    return [
        ("state", p["state"]), ("stage", p["stage"] or NA), ("epoch", _num(p["epoch"], ".2f")),
        ("step", step), ("samples seen", _num(p["samples"])),
        ("tokens seen", _num(p["tokens"])),
        ("speed", _num(p["steps_per_second"], ".3g", " steps/s")), ("ETA", eta),
        ("last step", duration(p["since_last_step"]) + " ago"
         if p["since_last_step"] is not None else NA),
        ("stalled", stall),
    ]


def _effect(e: dict[str, Any]) -> Rows:
    ema = [v for v in e["train_loss"]["ema"] if v is not None]
    return [
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
        ("changes", "; ".join(f"{m['text'] if m['kind'] == ADJUST else 'restart'} at step "
                              f"{m['step']:,}" + (f" ({m['why']})" if m.get("why") else "")
                              for m in e["markers"]) or "none"),
    ]


def _efficiency(f: dict[str, Any], state: str) -> Rows:
    slow = ", ".join(f"rank {r['rank']} ({r['host']}) {r['step_time']:.3g}s"
                     for r in f["slowest_ranks"]) or (
        "none: the ranks are even" if f["step_time_spread"] is not None else NA)
    return [
        ("GPU busy", _num(f["gpu_busy"], ".0f", "%") + _idle_note(state)),
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


RANKS_LISTED = 16  # the rank table's rows at most: the slowest, then how many more


def _share(value: float | None) -> str:
    return _num(None if value is None else 100 * value, ".0f", "%")


def _rank_table(f: dict[str, Any]) -> Table:
    """Where each rank's step time goes, slowest own time first (the Efficiency pane's
    table)."""
    ranks = f["ranks"][:RANKS_LISTED]
    rows: list[tuple[str, ...]] = [
        (str(r["rank"]), str(r["host"]), _num(r["wall_time"], ".3f", " s"),
         _num(r["step_time"], ".3f", " s"), _share(r["data_share"]), _share(r["comm_share"]),
         _num(None if r["behind"] is None else 100 * r["behind"], "+.0f", "%"))
        for r in ranks]
    more = f["rank_count"] - len(ranks)
    if more > 0:
        rows.append((f"+{more:,} more", "none slower", "", "", "", "", ""))
    return (("rank", "host", "step time", "own time", "data wait", "comm wait",
             "behind fastest"), rows)


def _host_table(h: dict[str, Any]) -> Table:
    return (
        ("host", "link", "GPUs", "health", "GPU state", "CPU", "memory", "disk",
         "last seen"),
        [(x["host"], x["state"], f"{x['gpus_online']}/{x['gpus_total']}", x["cause"],
          x["gpu_state"],
          _num(x["cpu"], ".0f", "%"), f"{size(x['mem_used'], ' ')} / {size(x['mem_total'], ' ')}",
          f"{size(x['disk_used'], ' ')} / {size(x['disk_total'], ' ')}", _when(x["last_seen"]))
         for x in h["hosts"]],
    )


def _gpu_table(h: dict[str, Any]) -> Table:
    return (
        ("host", "gpu", "state", "util", "temp", "power", "memory", "ECC unc", "XID",
         "throttle"),
        [(x["host"], str(g["index"]) + (" SIM" if g["simulated"] else ""), g["verdict"],
          _num(g["util"], ".0f", "%"), _num(g["temp"], ".0f", "°C"),
          f"{_num(g['power'], '.0f')} / {_num(g['power_limit'], '.0f', ' W')}",
          f"{size(g['mem_used'], ' ')} / {size(g['mem_total'], ' ')}", _num(g["ecc_unc"]),
          ("none" if g["xid"] is None and g.get("xid_watched") is True
           else _num(g["xid"], "d") + (f" ({g['xid_earlier']} before this run)"
                                       if g["xid_earlier"] else "")),
          throttle_text(g["throttle"]))
         for x in h["hosts"] for g in x["gpus"]],
    )


def _interruptions(d: dict[str, Any]) -> Table:
    return (
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


def _alerts(d: dict[str, Any]) -> Table:
    return (
        ALERT_HEADER,
        # A resolved (over) or acknowledged alert says so beside its severity.
        [(a["severity"] + ("" if a.get("state", "active") == "active" else f" ({a['state']})"),
          a["kind"], a["code"], a["where"], a["what"], a["hint"])
         for a in d["alerts"]],
    )
