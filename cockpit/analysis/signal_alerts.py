"""Alerts for what happened, not only for what holds now: each interruption of a job with
its classified cause, and the training signals that go wrong slowly (AMP loss scale
collapsing, gradient norm exploding, the loss on a plateau).

An interruption the agent recovered from is over, but an operator who looks an hour
later must still learn that the job died, why, where and what would stop it happening
again: it stays listed as "resolved". Repeats of one cause on one host fold into one
alert (first seen, last seen, how many). Thresholds come from `alert_config`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from agent.wire.events import INTERRUPTION
from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.alert_groups import covered
from cockpit.analysis.causes import cause_code, operator_end
from cockpit.analysis.lifecycle import dict_field, event_data
from cockpit.analysis.text import counted, where_text
from cockpit.snapshot import Alert, Interruption, Series

Row = Mapping[str, Any]

# The agent's causes (agent.job.recovery), the alert kind each is, and what to try.
CAUSE_KIND = {"oom": "resource", "gpu_fault": "resource", "nccl": "resource",
              "data": "data", "user_code": "parameter", "hang": "resource",
              "killed": "resource", "launch_failed": "resource", "unknown": "resource"}
CAUSE_WORDS = {"oom": "out of GPU memory", "gpu_fault": "a GPU fault (XID/ECC)",
               "nccl": "a collective/network failure (NCCL/gloo)", "data": "a bad input",
               "user_code": "an exception in the training code", "hang": "a hang",
               "killed": "a rank killed by a signal", "launch_failed": "a failed launch",
               "unknown": "an unrecognised failure"}
CAUSE_HINTS = {
    "gpu_fault": "drain the GPU named here (or exclude its host) and relaunch on the others; "
                 "reset it, and replace it if the XID recurs",
    "nccl": "check the network between the hosts named here (link errors, MTU, NCCL "
            "settings); a transient fault heals on restart, a recurring one needs the host "
            "drained",
    "user_code": "fix the code at the traceback in the job log (L), then resume from the "
                 "newest checkpoint",
    "hang": "the stacks the agent dumped before the kill (job log, L) show where the ranks "
            "waited; a rank stuck in a collective points at a peer host",
    "killed": "check the host's kernel log (dmesg: the OOM killer) and the job's host "
              "memory (RSS); lower DataLoader workers or prefetch if memory was the cause",
    "launch_failed": "fix the job spec (python, script, workdir) on the host named here",
    "unknown": "read the job log (L) around the failure",
}
ACKNOWLEDGED, RESOLVED, ACTIVE = "acknowledged", "resolved", "active"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any, fallback: float) -> float:
    """An event's time field: agents send numbers, but the event's `data` is a host's
    free-form dict, so anything else falls back."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else fallback


def _where(data: Mapping[str, Any]) -> dict[str, Any]:
    """The diagnosis's `where`, each part of the type it must have (a host's data)."""
    raw = dict_field(data, "where")
    text = {k: str(raw[k])[:300] for k in ("file", "range", "sample")
            if isinstance(raw.get(k), str | int) and not isinstance(raw.get(k), bool)}
    span = raw.get("range")
    if isinstance(span, list) and len(span) == 2 and all(_int(x) is not None for x in span):
        # The agent's own shape (agent.job.recovery: [first, last] from the evidence).
        text["range"] = f"{span[0]}-{span[1]}"
    return {"rank": _int(raw.get("rank")), "gpu": _int(raw.get("gpu")), **text}


def micro_batch_to_try(micro_batch: int | None, peak_used: float | None,
                       total: float | None, headroom: float) -> int | None:
    """The per-rank micro-batch that fits `headroom` of the GPU's memory, assuming the
    memory the failed attempt reached grows in proportion to it (an upper bound on what
    a batch costs: the weights and optimizer state do not grow); None when unknown."""
    if not micro_batch or micro_batch < 1 or not peak_used or not total or peak_used <= 0:
        return None
    fit = math.floor(micro_batch * headroom * total / peak_used)
    return max(1, min(fit, micro_batch - 1)) if micro_batch > 1 else None


def _oom_hint(micro_batch: int | None, memory: tuple[float, float] | None) -> str:
    used, total = memory if memory else (None, None)
    reached = (f"the failed attempt reached {used / 2**30:.1f} of {total / 2**30:.1f} GiB; "
               if used and total else "")
    try_mb = micro_batch_to_try(micro_batch, used, total, limits().oom_headroom)
    if try_mb is not None:
        return (f"{reached}try a micro-batch of {try_mb} per rank (now {micro_batch}), "
                "keeping the global batch with gradient accumulation; or enable activation "
                "checkpointing")
    if micro_batch == 1:
        return (f"{reached}the micro-batch is 1 already: enable activation checkpointing, "
                "shorten the sequence, or shard the optimizer state (ZeRO/FSDP)")
    return (f"{reached}halve the micro-batch per rank and keep the global batch with "
            "gradient accumulation; or enable activation checkpointing")


def _data_hint(where: Mapping[str, Any]) -> str:
    shard = where.get("file")
    span = where.get("range") or where.get("sample")
    if shard:
        return (f"inspect shard {shard}" + (f" (records {span})" if span else "")
                + ": repair or exclude it, then resume from the newest checkpoint")
    return ("the job log (L) names the input that failed: repair or exclude it, then "
            "resume from the newest checkpoint")


def interruption_alerts(
    events: Iterable[Row], incidents: Sequence[Interruption], *, now: float,
    micro_batch: int | None = None,
    memory: Mapping[str, tuple[float, float]] | None = None,
) -> list[Alert]:
    """One alert per (cause, host, rank) over the job's `interruption` events: its
    cause, where it struck (host, GPU, rank, step, file), and what to try.

    `incidents`: the merged interruptions (`merge_incidents`), which say whether each
    is recovered or over; `micro_batch`: per rank per step, from the train records;
    `memory`: per host, the (peak used, total) GPU memory before the newest failure.
    """
    groups: dict[tuple[str, str, Any], list[Row]] = {}
    for e in sorted(events, key=lambda e: float(e.get("ts") or 0.0)):
        if e.get("kind") != INTERRUPTION:
            continue
        data = event_data(e)
        if data.get("exclusion"):
            continue  # an elastic job went on without the host: not a failure of the job
        if operator_end(data.get("cause")):
            continue  # an older recording's operator stop (scancel): not a failure
        cause = str(data.get("cause") or "unknown")[:40]
        where = _where(data)
        groups.setdefault((cause, str(e.get("host")), where.get("rank")), []).append(e)
    out = []
    for (cause, host, rank), rows in groups.items():
        newest = rows[-1]
        data = event_data(newest)
        where = _where(data)
        step = _int(newest.get("step")) if newest.get("step") is not None else \
            _int(data.get("last_step"))
        place: dict[str, object] = {"host": host, "gpu": where.get("gpu"), "rank": rank,
                                    "file": where.get("file"), "range": where.get("range")}
        first = _time(event_data(rows[0]).get("detected_at"), _time(rows[0].get("ts"), now))
        last = _time(data.get("detected_at"), _time(newest.get("ts"), now))
        evidence = data.get("evidence")
        said = str(evidence[0] if isinstance(evidence, list) and evidence else evidence
                   or "")[:500]
        decision = dict_field(data, "decision")
        gave_up = decision.get("retry") is False
        times = f" {counted(len(rows), 'time')}," if len(rows) > 1 else ""
        what = (f"the job stopped{times} from {CAUSE_WORDS.get(cause, cause)}"
                + (f" at step {step:,}" if step is not None else "")
                + (f": {said}" if said else "")
                + ("; the agent stopped retrying" if gave_up else ""))
        if cause == "oom":
            hint = _oom_hint(micro_batch, (memory or {}).get(host))
        elif cause == "data":
            hint = _data_hint(where)
        else:
            hint = CAUSE_HINTS.get(cause) or str(data.get("hint") or CAUSE_HINTS["unknown"])
        state = ACTIVE if gave_up or not _over(last, host, incidents) else RESOLVED
        out.append(Alert(ts=first, kind=CAUSE_KIND.get(cause, "resource"),
                         severity="critical" if state == ACTIVE else "warning",
                         code=f"interrupted_{cause_code(cause)}", where=where_text({
                             **place, "step": step}), what=what, hint=hint, state=state,
                         last_seen=last))
    return out


def _over(detected_at: float, host: str, incidents: Sequence[Interruption]) -> bool:
    """Whether the outage that began at `detected_at` on `host` is recovered or ended."""
    mine = [i for i in incidents if not i.hosts or host in i.hosts]
    before = [i for i in mine if i.detected_at <= detected_at + 1e-6]
    if not before:
        return any(i.recovered_in is not None or i.ended_by for i in mine)
    newest = max(before, key=lambda i: i.detected_at)
    return newest.recovered_in is not None or newest.ended_by is not None


def _points(series: Series) -> list[tuple[float, float]]:
    return [(x, v) for x, v in zip(series.x, series.last, strict=False)
            if v is not None and math.isfinite(v)]


def loss_scale_alerts(series: Series, *, now: float) -> list[Alert]:
    """AMP's dynamic loss scale halves on every overflow: fallen far below its peak (or
    to its floor), the steps are mostly being skipped or the gradients overflow."""
    pts = _points(series)
    if len(pts) < 2:
        return []
    t = limits()
    peak_at, peak = max(pts, key=lambda p: p[1])
    step, last = pts[-1]
    if step <= peak_at or peak <= 0:
        return []
    if last > t.loss_scale_floor and peak / max(last, 1e-300) < t.loss_scale_collapse:
        return []
    return [Alert(ts=now, kind="parameter", severity="warning", code="loss_scale_collapse",
                  where=where_text({"step": int(step)}),
                  what=f"AMP loss scale fell from {peak:g} (step {peak_at:,.0f}) to {last:g}",
                  hint="overflows every step: lower the LR or clip gradients; if it stays "
                       "at its floor, use bf16 or find the layer producing inf (anomaly "
                       "detection)")]


def grad_norm_alerts(series: Series, *, now: float) -> list[Alert]:
    """A gradient norm many times its recent median: the update that follows can wreck
    the weights (a loss spike or NaN next)."""
    pts = _points(series)
    if len(pts) < 5:
        return []
    step, last = pts[-1]
    window = [v for _, v in pts[-30:-1]]
    base = statistics.median(window)
    if base <= 0 or last < limits().grad_norm_explosion * base:
        return []
    return [Alert(ts=now, kind="parameter", severity="warning", code="grad_norm_explosion",
                  where=where_text({"step": int(step)}),
                  what=f"gradient norm {last:.3g} at step {step:,.0f}, {last / base:.0f}× "
                       f"its recent median {base:.3g}",
                  hint="enable gradient clipping (e.g. max norm 1.0) or lower the LR; "
                       "inspect the batch at that step")]


def plateau_alerts(series: Series, *, now: float) -> list[Alert]:
    """The smoothed loss has barely moved over the last `plateau_points` chart points:
    more steps buy little (an LR too low, or a model at its capacity)."""
    t = limits()
    pts = _points(series)
    if len(pts) < t.plateau_points:
        return []
    recent = pts[-t.plateau_points:]
    first, last = recent[0][1], recent[-1][1]
    if first <= 0 or (first - last) / first >= t.plateau_min_drop:
        return []
    return [Alert(ts=now, kind="parameter", severity="info", code="loss_plateau",
                  where=where_text({"step": f"{recent[0][0]:.0f}-{recent[-1][0]:.0f}"}),
                  what=f"smoothed train loss moved {100 * (first - last) / first:+.1f}% "
                       f"(from {first:.4g} to {last:.4g}) over steps "
                       f"{recent[0][0]:,.0f}-{recent[-1][0]:,.0f}",
                  hint="try a higher LR (l) or an LR decay step; if validation also stopped "
                       "improving, stop here and keep the best checkpoint")]


def acknowledge(alerts: Iterable[Alert], acked: Collection[tuple[str, str]]) -> tuple[Alert, ...]:
    """The active alerts whose (code, where) the operator acknowledged read so (a GPU
    group's, while it names no GPU the acknowledged one did not: `alert_groups.covered`);
    resolved ones stay resolved (the condition is over, whoever saw it)."""
    return tuple(dataclasses.replace(a, state=ACKNOWLEDGED)
                 if a.state == ACTIVE and covered(a.code, a.where, acked) else a
                 for a in alerts)
