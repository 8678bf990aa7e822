"""Alerts raised from telemetry: resource, data and parameter, each with where and a hint.

Every rule takes plain rows (dicts shaped like the store's tables) and returns
`cockpit.snapshot.Alert`s; `merge` folds them with the agent's own alerts, keeps one per
(code, where), and orders them worst first. The hint is what an operator should try
next, not a restatement of the problem.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from agent.wire.events import DROPPED, SPOOL_ERROR, XID
from cockpit.analysis import throttle as throttle_bits
from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.alert_ends import ENDED_BY_A_STEP, AlertEnds, alert_mark
from cockpit.analysis.alert_groups import per_host
from cockpit.analysis.divergence import Divergence
from cockpit.analysis.jump_hosts import jump_host_alerts, jump_host_down
from cockpit.analysis.lifecycle import dict_field
from cockpit.analysis.stalls import CONTENTION, DATA_STARVED, STRAGGLER, StallVerdict
from cockpit.analysis.text import counted, duration, where_text
from cockpit.snapshot import Alert, Interruption
from cockpit.transport import states as link

Row = Mapping[str, Any]

RESOURCE, DATA, PARAMETER = "resource", "data", "parameter"
INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITY_RANK = {CRITICAL: 0, WARNING: 1, INFO: 2}

BAD_LINK_STATES = {
    link.UNREACHABLE: CRITICAL,
    link.AUTH_FAILED: CRITICAL,
    link.HOSTKEY_UNKNOWN: CRITICAL,
    link.HOSTKEY_CHANGED: CRITICAL,
    link.AGENT_MISSING: WARNING,
    link.STALE: WARNING,
}

# What an XID usually means, and what to do about it (NVIDIA XID catalogue).
XID_HINTS: dict[int, tuple[str, str]] = {
    13: (WARNING, "graphics engine exception: usually the application (bad kernel or "
                  "out-of-bounds access); rerun with CUDA_LAUNCH_BLOCKING=1 to locate it"),
    31: (WARNING, "GPU memory page fault: usually an application bug; check the job log"),
    43: (WARNING, "GPU stopped processing: the job was killed or hung; check the job log"),
    45: (INFO, "preemptive cleanup after a killed job: follows another fault"),
    48: (CRITICAL, "double-bit ECC error: drain this GPU, reset it, replace it if it recurs"),
    63: (WARNING, "ECC page retirement / row remap recorded: reset the GPU when convenient"),
    64: (CRITICAL, "ECC page retirement / row remap failed: drain and replace this GPU"),
    74: (CRITICAL, "NVLink error: check the NVLink bridge/fabric; drain the GPU pair"),
    79: (CRITICAL, "GPU fell off the bus: drain the host; check power, PCIe seating, firmware"),
    92: (WARNING, "high single-bit ECC rate: schedule a GPU reset and watch for XID 48"),
    94: (WARNING, "contained ECC error: restart the affected job; the GPU can stay"),
    95: (CRITICAL, "uncontained ECC error: reset the GPU before reuse"),
}


def _alert(ts: float, kind: str, severity: str, code: str, where: dict[str, object],
           what: str, hint: str) -> Alert:
    return Alert(ts=float(ts), kind=kind, severity=severity, code=code,
                 where=where_text(where), what=what, hint=hint)


def _frac(used: Any, total: Any) -> float | None:
    return used / total if used is not None and total else None


# The throttle reasons `gpu_alerts` raises an alert for: heat, and a power brake or
# slowdown.
_HEAT_THROTTLE = throttle_bits.HW_THERMAL | throttle_bits.SW_THERMAL
_POWER_THROTTLE = throttle_bits.HW_POWER_BRAKE | throttle_bits.HW_SLOWDOWN


def gpu_alerts(gpus: Iterable[Row]) -> list[Alert]:
    """From the latest sample of each GPU; several GPUs of one host with the same alert
    are one alert (`alert_groups.per_host`)."""
    out: list[Alert] = []
    of: list[tuple[Any, Any, bool]] = []  # each alert's host, GPU and simulated flag
    for g in gpus:
        throttle = g.get("throttle") or 0
        if not (throttle & (_HEAT_THROTTLE | _POWER_THROTTLE) or (g.get("ecc_vol_unc") or 0) > 0
                or g.get("remap_pending")):
            continue  # a well GPU (a fleet's are almost all): nothing more to look at
        found = len(out)
        where = {"host": g.get("host"), "gpu": g.get("gpu")}
        ts = g.get("ts") or 0.0
        if throttle & _HEAT_THROTTLE:
            out.append(_alert(
                ts, RESOURCE, WARNING, "thermal_throttle", where,
                f"GPU clocks throttled for temperature ({_num(g.get('temp'), '°C')})",
                "check cooling, airflow and fan speed; one throttled GPU slows every rank "
                "of a synchronous job",
            ))
        if throttle & _POWER_THROTTLE:
            out.append(_alert(
                ts, RESOURCE, WARNING, "power_throttle", where,
                f"GPU clocks cut by a hardware power brake/slowdown "
                f"({_num(g.get('power'), 'W')} of {_num(g.get('power_limit'), 'W')})",
                "check the PSU and rack power budget; the host's BMC log names the trigger",
            ))
        if (g.get("ecc_vol_unc") or 0) > 0:
            out.append(_alert(
                ts, RESOURCE, CRITICAL, "ecc_uncorrected", where,
                f"{g.get('ecc_vol_unc')} uncorrectable ECC errors since the last reset",
                "results on this GPU may be corrupt: relaunch from the last checkpoint without "
                "it, then reset it; replace it if errors recur",
            ))
        if g.get("remap_pending"):
            out.append(_alert(
                ts, RESOURCE, WARNING, "remap_pending", where,
                "a memory row remap is pending a GPU reset",
                "reset the GPU at the next checkpoint boundary",
            ))
        of += [(g.get("host"), g.get("gpu"), bool(g.get("sim")))] * (len(out) - found)
    return per_host(out, of)


def xid_alerts(events: Iterable[Row]) -> list[Alert]:
    out = []
    for e in events:
        if e.get("kind") != XID:
            continue
        data = e.get("data") or {}
        xid = data.get("xid")
        severity, hint = XID_HINTS.get(
            xid if isinstance(xid, int) else -1,
            (WARNING, "look the code up in NVIDIA's XID catalogue; check dmesg on the host"),
        )
        out.append(_alert(
            e.get("ts") or 0.0, RESOURCE, severity, "gpu_xid",
            {"host": e.get("host"), "gpu": data.get("gpu"), "step": e.get("step")},
            e.get("msg") or f"XID {xid}", hint,
        ))
    return out


def host_alerts(hosts: Iterable[Row], samples: Iterable[Row], *, now: float) -> list[Alert]:
    """`hosts`: host rows with `state`, `last_seen` and `state_since` (when the link
    entered its state, if known); `samples`: latest host samples. An alert is dated when
    its condition began where that is known, else `now`.

    Hosts unreachable because their jump host is down are one alert, the jump host's,
    naming the hosts behind it (`jump_host_alerts`), not one "host down" per host."""
    out = []
    behind: dict[str, list[Row]] = {}
    for h in hosts:
        name = h.get("host")
        state = h.get("state")
        last = h.get("last_seen")
        jump = jump_host_down(str(h.get("detail") or h.get("last_error") or ""))
        if state == link.UNREACHABLE and jump is not None:
            behind.setdefault(jump, []).append(h)
        elif state in BAD_LINK_STATES:
            detail = h.get("detail") or h.get("last_error")
            out.append(_alert(
                h.get("state_since") or now, RESOURCE, BAD_LINK_STATES[state],
                "host_" + state.replace("-", "_"),
                {"host": name},
                f"link to host is {state}" + (f": {detail}" if detail else ""),
                _link_hint(state, str(detail or "")),
            ))
        elif last is not None and now - last > limits().host_silent_s:
            out.append(_alert(
                last, RESOURCE, WARNING, "host_stale", {"host": name},
                f"no record from this host for {duration(now - last)}",
                "check the host is up and the agent running (`cockpit-agent run`); "
                "records are kept on the host and resent on reconnect",
            ))
    for s in samples:
        where = {"host": s.get("host")}
        disk = _frac(s.get("disk_used"), s.get("disk_total"))
        if disk is not None and disk >= limits().disk_warn:
            out.append(_alert(
                s.get("ts") or now, RESOURCE,
                CRITICAL if disk >= limits().disk_critical else WARNING,
                "disk_nearly_full", where,
                f"disk {s.get('disk_path') or ''} {100 * disk:.0f}% full".replace("  ", " "),
                "free space or move old checkpoints off this filesystem: a checkpoint that "
                "fails to write loses all work since the previous one",
            ))
        mem = _frac(s.get("mem_used"), s.get("mem_total"))
        if mem is not None and mem >= limits().memory_warn:
            out.append(_alert(
                s.get("ts") or now, RESOURCE, WARNING, "memory_pressure", where,
                f"host memory {100 * mem:.0f}% used",
                "reduce DataLoader workers or prefetch depth, or look for a leak in the "
                "job processes' RSS; the OOM killer is next",
            ))
    out.extend(jump_host_alerts(behind, now=now))
    return out


def _link_hint(state: str, detail: str = "") -> str:
    if detail.startswith("jump host ") and " cannot reach " in detail:
        return ("the jump host answered but cannot reach this host: check the host is up "
                "and that its SSH port is open to the jump host")
    if detail.startswith("jump host "):  # the bastion is down, not this host
        return ("the jump host named above is down or unreachable: check it; every host "
                "behind it is out until it answers, and their agents keep recording")
    if state == link.HOSTKEY_UNKNOWN:
        return "verify the host key out of band, then `cockpit hosts trust HOST`"
    if state == link.HOSTKEY_CHANGED:
        return "verify the host key out of band, then update known_hosts"
    if state == link.AUTH_FAILED:
        return "check the SSH user, key and ssh-agent for this host"
    if state == link.AGENT_MISSING:
        return "deploy the agent (the cockpit can push its zipapp over SFTP)"
    return "check the host is up and reachable over SSH; the agent keeps recording meanwhile"


def data_alerts(
    *, data_wait_pct: float | None, worst: tuple[int, str, float] | None,
    events: Iterable[Row], now: float,
) -> list[Alert]:
    """`worst`: (rank, host, data share 0..1) of the most data-starved rank."""
    out = []
    if data_wait_pct is not None and data_wait_pct >= limits().data_wait_warn_pct:
        where: dict[str, object] = {}
        if worst is not None:
            where = {"host": worst[1], "rank": worst[0]}
        out.append(_alert(
            now, DATA, WARNING, "data_starved", where,
            f"the input pipeline takes {data_wait_pct:.0f}% of step time",
            "add DataLoader workers, enable pin_memory and prefetching, or stage the data "
            "on local disk",
        ))
    spool: dict[tuple[Any, Any], list[Row]] = {}
    for e in events:
        if e.get("kind") == SPOOL_ERROR:
            file = (e.get("data") or {}).get("file")
            spool.setdefault((e.get("host"), file), []).append(e)
        elif e.get("kind") == DROPPED:
            data = dict_field(e, "data")
            count = data.get("count")
            reason = data.get("reason") or "retention"
            out.append(_alert(
                e.get("ts") or now, DATA, WARNING, "records_dropped", {"host": e.get("host")},
                f"the host journal dropped {count if count is not None else 'some'} records "
                f"({reason})",
                # Held in memory while the journal's disk was full, then the oldest samples
                # gave way: room on that disk is the cure, not a larger cap.
                "free space on the host's journal disk (df -h on its state dir); samples "
                "are dropped first, events and alerts kept" if reason == "disk full" else
                "check the host's journal disk for I/O errors (dmesg)"
                if reason == "write error" else
                "connect the cockpit more often or raise the agent's journal cap",
            ))
    for (host, file), rows in spool.items():
        # The agent sums a flood of refused lines in one event (`data.count`, its first
        # and last line in `data.lines`): each such event stands for that many lines.
        lines, count, kept = [], 0, None
        for r in rows:
            data = r.get("data") or {}
            span = data.get("lines")
            lines += [x for x in (span if isinstance(span, list) else [data.get("line")])
                      if isinstance(x, int) and not isinstance(x, bool)]
            n = data.get("count")
            count += n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
            kept = data.get("kept") if isinstance(data.get("kept"), str) else kept
        lines.sort()
        line_range = f"{lines[0]}-{lines[-1]}" if lines else None
        out.append(_alert(
            max(r.get("ts") or 0.0 for r in rows), DATA, WARNING, "spool_error",
            {"host": host, "file": file, "range": line_range},
            f"{count} malformed trainer report lines skipped",
            "look for a second writer on the same spool file or a full disk; the lines "
            "are named in the event log"
            + (f" and kept as written in {kept} on the host" if kept else ""),
        ))
    return out


def parameter_alerts(
    *, nonfinite_steps: Sequence[int], spike_steps: Sequence[float],
    divergence: Divergence | None, lr_reason: str | None, now: float,
    nonfinite_count: int | None = None, nonfinite_last: int | None = None,
    nonfinite_since: float | None = None,
) -> list[Alert]:
    """`nonfinite_steps` may be the first of many: `nonfinite_count` and
    `nonfinite_last` then say how many and the newest."""
    out = []
    if nonfinite_steps:
        first = min(nonfinite_steps)
        count = nonfinite_count or len(nonfinite_steps)
        last = nonfinite_last if nonfinite_last is not None else max(nonfinite_steps)
        span = f"first at step {first:,}" + (f", last at step {last:,}" if last != first else "")
        out.append(_alert(
            nonfinite_since or now, PARAMETER, CRITICAL, "nonfinite_loss", {"step": first},
            f"loss was NaN/Inf at {counted(count, 'step')}, {span}",
            "roll back to the checkpoint before that step; lower the LR or enable gradient "
            "clipping; with AMP check the loss scale; inspect the batch at that step",
        ))
    if spike_steps:
        steps = ", ".join(f"{s:.0f}" for s in spike_steps[-5:])
        out.append(_alert(
            now, PARAMETER, WARNING, "loss_spike", {"step": f"{spike_steps[-1]:.0f}"},
            f"{counted(len(spike_steps), 'loss spike')} (latest near "
            f"{'step' if len(spike_steps) == 1 else 'steps'} {steps})",
            "inspect the batches at those steps for bad samples; clip gradients or lower "
            "the LR if spikes recur",
        ))
    if divergence is not None and divergence.step is not None:
        out.append(_alert(
            now, PARAMETER, WARNING, "divergence", {"step": divergence.step},
            f"validation loss has not improved for {divergence.evals_since_best} evaluations "
            f"since step {divergence.best_step} while train loss fell "
            f"{100 * (divergence.train_drop or 0):.0f}%",
            f"the best model is near step {divergence.best_step}: stop, or roll back to the "
            "checkpoint nearest it if one is still kept (raise `keep` to hold more); add "
            "regularisation, augmentation or data",
        ))
    if lr_reason:
        out.append(_alert(
            now, PARAMETER, WARNING, "lr_too_high", {},
            f"learning rate looks too high: {lr_reason}",
            "lower the peak LR (e.g. halve it) or lengthen the warm-up; enable gradient "
            "clipping",
        ))
    return out


def rejected_alerts(hosts: Iterable[Row],
                    wire_errors: Mapping[str, tuple[float, int]]) -> list[Alert]:
    """Records a host sent that could not be stored whole: counted and sampled by the
    store, but invisible unless said. `wire_errors`: per host, when the first arrived and
    how many of the kept samples were stored without some values (the rest: rejected)."""
    out = []
    for h in hosts:
        name = str(h.get("host"))
        if name not in wire_errors:
            continue
        first, repaired = wire_errors[name]
        count = int(h.get("malformed") or 0)
        parts = []
        if count:
            parts.append(f"{counted(count, 'record')} from this host could not be stored")
        if repaired:
            parts.append(f"{'at least ' if repaired >= 100 else ''}"
                         f"{counted(repaired, 'record')} stored without values their columns "
                         "cannot hold (shown n/a)")
        if not parts:
            continue
        last = h.get("last_error")
        out.append(_alert(
            first, DATA, WARNING, "records_rejected", {"host": name},
            "; ".join(parts) + (f"; the last: {last}" if last else ""),
            "the first ones are kept in the recording's wire_errors table; a trainer "
            "reporting values out of range, or an agent newer than this cockpit, are the "
            "usual causes",
        ))
    return out


_IDENTITY_WORDS = {"git_commit": "git commit", "data_version": "data version",
                   "seed": "seed"}


def run_change_alerts(changes: Iterable[Row]) -> list[Alert]:
    """A job that restarted on other code, data or seed: its curves before and after that
    moment compare two different runs, which nothing on the chart shows."""
    out = []
    for c in changes:
        name = _IDENTITY_WORDS.get(str(c.get("field")), str(c.get("field")))
        out.append(_alert(
            float(c.get("ts") or 0.0), DATA, WARNING, "run_changed", {"host": c.get("host")},
            f"the job's {name} changed from {c.get('old')} to {c.get('new')}",
            "the steps after it train other code or data: compare the loss before and "
            "after with care; if unintended, pause and resume from the intended version",
        ))
    return out


def interruption_alerts(interruptions: Sequence[Interruption], *,
                        gave_up: bool = False) -> list[Alert]:
    """The newest interruption while it is not recovered: the job is down now, which
    the interruption log shows but the alert count must say too. `gave_up`: the agent
    stopped retrying (the job is "failed"), so no restart is coming."""
    if not interruptions:
        return []
    newest = max(interruptions, key=lambda i: i.detected_at)
    if newest.recovered_in is not None or newest.ended_by is not None:
        return []  # recovered, or over by the operator's (or a peer's) end of the job
    where: dict[str, object] = {"host": newest.hosts[0]} if newest.hosts else {}
    evidence = f": {newest.evidence}" if newest.evidence else ""
    if gave_up:
        return [_alert(
            newest.detected_at, RESOURCE, CRITICAL, "job_interrupted", where,
            f"the job stopped ({newest.cause}){evidence}; the agent stopped retrying: it "
            "stays down",
            "fix what failed (the job log, L, and the events, a, say what), then resume (r) "
            "or relaunch (R)",
        )]
    return [_alert(
        newest.detected_at, RESOURCE, CRITICAL, "job_interrupted", where,
        f"the job stopped ({newest.cause}){evidence}; not recovered yet",
        "the agent restarts it from the newest valid checkpoint when its policy allows; "
        "the job log (L) and the events (a) say what it is doing",
    )]


STALL_HINTS = {
    DATA_STARVED: "add DataLoader workers or prefetching; check the data source's throughput",
    CONTENTION: "find what else runs on that host (CPU, memory, disk) and move it away",
    STRAGGLER: "check that rank's GPU (throttling, errors) and its host; exclude the host "
               "and relaunch if it stays slow",
    None: "read the job log and the host's processes (state D = blocked on I/O)",
}


def stall_alerts(verdict: StallVerdict, *, now: float, since: float | None = None
                 ) -> list[Alert]:  # fmt: skip
    """`since`: the last step's time, when the job stopped progressing."""
    if not verdict.stalled:
        return []
    kind = DATA if verdict.cause == DATA_STARVED else RESOURCE
    severity = CRITICAL if verdict.kind == "no progress" else WARNING
    code = "stall" if verdict.kind == "no progress" else "slowdown"
    when = since if since is not None and verdict.kind == "no progress" else now
    return [_alert(when, kind, severity, code, dict(verdict.where),
                   verdict.detail or "the job stopped progressing",
                   STALL_HINTS.get(verdict.cause, STALL_HINTS[None]))]


def stored_alerts(rows: Iterable[Row], started: Mapping[str, float] | None = None,
                  started_on: Mapping[tuple[str, str], float] | None = None, *,
                  stopped: Mapping[str, float] | None = None,
                  left: Mapping[tuple[str, str], float] | None = None,
                  stepped: Collection[tuple[str, str, float]] = frozenset()
                  ) -> list[Alert]:  # fmt: skip
    """Alerts the agents raised themselves (the `alert` table).

    `started` maps a job to the time it last started (launch, resume, relaunch), and
    `started_on` a (job, host) to the time that host's part did: an alert that the job
    is down for good, raised before that, is over, since the operator fixed and
    restarted the job; still shown, it would keep a critical alert on a job that trains.
    `stopped` and `left` (`AlertEnds`) and `stepped`, the (job, host, ts) of the alerts
    about a failed start after which that host's part made a step, end those alerts
    too (`ENDED_BY_A_STEP`)."""
    ends = AlertEnds(started or {}, started_on or {}, stopped or {}, left or {})
    out = []
    for r in rows:
        if ends.over(r) or (r.get("code") in ENDED_BY_A_STEP and alert_mark(r) in stepped):
            continue
        where = r.get("where")
        out.append(Alert(
            ts=float(r.get("ts") or 0.0),
            kind=r.get("kind") or RESOURCE,
            severity=r.get("severity") or WARNING,
            code=r.get("code") or "agent_alert",
            where=where_text({"host": r.get("host"), **where})
            if isinstance(where, dict) else where_text({"host": r.get("host")}),
            what=r.get("what") or "",
            hint=r.get("hint") or "",
        ))
    return out


def merge(*groups: Iterable[Alert]) -> tuple[Alert, ...]:
    """One alert per (code, where), the newest; worst severity first, then newest first."""
    keep: dict[tuple[str, str], Alert] = {}
    for group in groups:
        for a in group:
            key = (a.code, a.where)
            if key not in keep or a.ts >= keep[key].ts:
                keep[key] = a
    return tuple(sorted(keep.values(), key=lambda a: (SEVERITY_RANK.get(a.severity, 3), -a.ts)))


def _num(value: Any, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f} {unit}"
