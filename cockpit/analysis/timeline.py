"""One timeline: the hardware and link faults placed at the steps they hit, and the
job's stages over time.

A loss spike or a throughput dip is explained by what happened to the machines at that
moment: an XID, an uncorrectable ECC error, a GPU throttled for heat or power, a host
the cockpit lost. Those are seen by their time, the curves are drawn by step, so each
fault is placed at the step the job was training when it was seen (`place`): the
reference rank's newest step at or before it. A fault seen when no step had been
trained for a long while (`StoreReader.steps_at`) is on no curve and is left out.

Many GPUs fail together (a host's eight throttle in one heat wave, a rack drops off the
network): one mark per kind and step, naming the first host and how many more, keeps
a chart of 1,024 GPUs readable.

The stage band (`stage_spans`) reads the lifecycle events: start-up until the first
step after a launch, restarting from an interruption until the job trains again,
paused between a pause and a resume, a checkpoint for the time its save took, and the
trainer's own `stage` events (train, eval) in between.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.wire import launch_reasons
from agent.wire.events import (
    CHECKPOINT_SAVED,
    INTERRUPTION,
    JOB_ADOPTED,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RECOVERY,
    RESUME,
    RESUMED,
    STAGE,
    XID,
)
from cockpit.analysis import throttle as throttle_bits
from cockpit.analysis.lifecycle import event_data, took_effect
from cockpit.snapshot import Marker, StageSpan
from cockpit.transport.states import UNREACHABLE

# A fault mark's `kind`: an XID, a rise in uncorrectable ECC errors, a harmful throttle, a
# host the cockpit lost.
XID_FAULT = "xid"
ECC_FAULT = "ecc"
THROTTLE_FAULT = "throttle"
UNREACHABLE_FAULT = "unreachable"
FAULT_KINDS = (XID_FAULT, ECC_FAULT, THROTTLE_FAULT, UNREACHABLE_FAULT)
FAULT_LIMIT = 200  # fault marks kept, newest steps
# Throttling that slows a step: heat, power brakes and hardware slowdown, not an idle
# GPU or clocks an administrator set (`cockpit.analysis.throttle.BENIGN`).
HARMFUL_THROTTLE = (throttle_bits.SW_THERMAL | throttle_bits.HW_THERMAL
                    | throttle_bits.HW_POWER_BRAKE | throttle_bits.HW_SLOWDOWN)
UNREACHABLE_STATES = (UNREACHABLE,)

# The stages a band shows, the most telling first: a cell of the band covering several
# shows the first of them, so a ten-second checkpoint in an hour per cell still shows.
RESTARTING_STAGE = "restarting"
PAUSED_STAGE = "paused"
CHECKPOINT_STAGE = "checkpoint"
EVAL_STAGE = "eval"
START_UP_STAGE = "start-up"
TRAIN_STAGE = "train"
STAGES = (RESTARTING_STAGE, PAUSED_STAGE, CHECKPOINT_STAGE, EVAL_STAGE, START_UP_STAGE,
          TRAIN_STAGE)
STAGE_EVENT_KINDS = (JOB_STARTED, JOB_ADOPTED, JOB_EXITED, PAUSE, RESUME, INTERRUPTION,
                     RECOVERY, RESUMED, STAGE, CHECKPOINT_SAVED)
STARTS = (JOB_STARTED, RESUME)  # events after which the first step ends a start-up
FIRST_STEP = "first_step"  # `stage_spans`'s own mark: the first step after a start


@dataclass(frozen=True)
class Fault:
    """A fault as seen, before it is placed on a step."""

    ts: float
    host: str
    kind: str  # one of FAULT_KINDS
    text: str


def xid_faults(events: Iterable[Mapping[str, Any]]) -> list[Fault]:
    """The XID events as faults: "XID 79 gpu 3"."""
    out = []
    for e in events:
        if e.get("kind") != XID or e.get("ts") is None:
            continue
        data = event_data(e)
        xid, gpu = data.get("xid"), data.get("gpu")
        text = f"XID {xid}" if isinstance(xid, int) else str(e.get("msg") or "XID")
        if isinstance(gpu, int):
            text += f" gpu {gpu}"
        out.append(Fault(float(e["ts"]), str(e.get("host") or "?"), XID_FAULT, text))
    return out


GpuState = dict[tuple[str, int], tuple[bool, int]]  # (host, gpu) -> (throttled, ECC count)


def gpu_faults(rows: Iterable[Mapping[str, Any]], held: Mapping[tuple[str, int], tuple[bool, int]]
               | None = None) -> tuple[list[Fault], GpuState]:
    """Where a GPU began throttling for heat or power, or its uncorrectable ECC count
    rose, in samples oldest first (`StoreReader.gpu_fault_changes`), and each GPU's state
    after them, to carry on from with the samples that follow.

    A GPU first seen already throttled or with errors counts as a fault then: the
    cockpit knows of it from that sample on. `held` is what earlier samples left."""
    state: GpuState = dict(held or {})
    out = []
    for r in rows:
        key = (str(r["host"]), int(r["gpu"]) if r.get("gpu") is not None else -1)
        mask = r.get("throttle") or 0
        hot = bool(mask & HARMFUL_THROTTLE)
        ecc = int(r.get("ecc_vol_unc") or 0)
        was_hot, was_ecc = state.get(key, (False, 0))
        ts = float(r["ts"])
        if hot and not was_hot:
            out.append(Fault(ts, key[0], THROTTLE_FAULT,
                             f"gpu {key[1]} throttled: {throttle_bits.throttle_text(mask)}"))
        if ecc > was_ecc:
            out.append(Fault(ts, key[0], ECC_FAULT, f"gpu {key[1]} {ecc} uncorrectable ECC"))
        state[key] = (hot, ecc)
    return out, state


def fault_rows(rows: Iterable[Mapping[str, Any]],
               held: Mapping[tuple[str, int], tuple[bool, int]] | None
               ) -> list[Mapping[str, Any]]:  # fmt: skip
    """The rows `gpu_faults` must see to carry on exactly from `held`: those of the
    hosts with a GPU throttled or counting errors, in `rows` or in `held`. Every other
    row leaves its GPU as it was, untroubled (a GPU `held` does not name is
    untroubled), so it changes nothing. A live fleet adds every GPU's sample each
    second, almost all of them well: they are passed over here, not sorted and
    followed one by one."""
    rows = list(rows)
    hosts = {key[0] for key, (hot, ecc) in (held or {}).items() if hot or ecc}
    hosts.update(str(r["host"]) for r in rows
                 if (r.get("throttle") or 0) & HARMFUL_THROTTLE or r.get("ecc_vol_unc"))
    return [r for r in rows if str(r["host"]) in hosts] if hosts else []


def link_faults(hosts: Iterable[Mapping[str, Any]]) -> list[Fault]:
    """Hosts the cockpit cannot reach now, since their link said so (`state` is the
    link's word as shown, `state_ts` when it began)."""
    return [Fault(float(h["state_ts"]), str(h["host"]), UNREACHABLE_FAULT,
                  "host unreachable")
            for h in hosts
            if h.get("state") in UNREACHABLE_STATES and h.get("state_ts") is not None]


def on_hosts(faults: Iterable[Fault], hosts: Collection[str]) -> list[Fault]:
    """The faults on the job's `hosts`: one elsewhere in the fleet (a host training
    another job, or idle) did nothing to this job's curves."""
    return [f for f in faults if f.host in hosts]


def place(faults: Iterable[Fault], steps: Mapping[float, int | None],
          limit: int = FAULT_LIMIT) -> tuple[Marker, ...]:
    """The faults at their steps (`steps`: the step trained at each fault's time), one
    mark per kind and step: the first host seen there, and how many more. By step;
    the newest `limit`."""
    grouped: dict[tuple[int, str], list[Fault]] = {}
    for fault in faults:
        step = steps.get(fault.ts)
        if step is not None:
            grouped.setdefault((step, fault.kind), []).append(fault)
    marks = []
    for (step, kind), found in grouped.items():
        found.sort(key=lambda f: (f.ts, f.host, f.text))
        first = found[0]
        hosts = {f.host for f in found}
        more = f" (+{len(hosts) - 1} more hosts)" if len(hosts) > 1 else ""
        text = f"{first.host}: {first.text}{more}"
        marks.append(Marker(step, kind, text, host=first.host, ts=first.ts))
    marks.sort(key=lambda m: (m.step, FAULT_KINDS.index(m.kind), m.text))
    return tuple(marks[-limit:])


def _stage_of(event: Mapping[str, Any], current: str | None) -> str | None:
    """The stage an event starts (None: the job's processes are not running), or
    `current` when it changes none."""
    kind = event.get("kind")
    data = event_data(event)
    if not took_effect(event):  # a refused pause or resume left the job as it was
        return current
    if kind == JOB_STARTED:
        recovery = data.get("reason") == launch_reasons.RECOVERY
        return RESTARTING_STAGE if recovery else START_UP_STAGE
    if kind == JOB_ADOPTED:
        return current or (TRAIN_STAGE if data.get("running") is True else None)
    if kind == JOB_EXITED:
        return None
    if kind == INTERRUPTION:
        return RESTARTING_STAGE
    if kind == PAUSE:
        return PAUSED_STAGE
    if kind == RESUME:
        return START_UP_STAGE
    if kind in (RECOVERY, RESUMED):
        return TRAIN_STAGE
    if kind == FIRST_STEP:
        return TRAIN_STAGE if current in (START_UP_STAGE, RESTARTING_STAGE) else current
    if kind == STAGE:
        named = str(data.get("stage") or "").lower()
        if named.startswith(("eval", "valid")):
            return EVAL_STAGE
        if named.startswith("checkpoint"):
            return CHECKPOINT_STAGE
        return TRAIN_STAGE
    return current


def stage_spans(events: Sequence[Mapping[str, Any]], now: float,
                first_steps: Iterable[float] = ()) -> tuple[StageSpan, ...]:
    """The job's stages over time from its lifecycle events (any order), up to `now`.

    `first_steps`: when the job trained its first step after each start (`STARTS`),
    which ends the start-up of a trainer that sends no `stage` events. A saved
    checkpoint's span is the time its save took, cut out of whatever stage it
    interrupted.
    """
    marks = [{"ts": ts, "kind": FIRST_STEP} for ts in first_steps]
    ordered = sorted((e for e in (*events, *marks)
                      if e.get("ts") is not None and float(e["ts"]) <= now),
                     key=lambda e: (float(e["ts"]), e.get("seq") or 0))
    changes: list[tuple[float, str | None]] = []
    saves: list[tuple[float, float]] = []
    current: str | None = None
    for e in ordered:
        ts = float(e["ts"])
        if e.get("kind") == CHECKPOINT_SAVED:
            seconds = event_data(e).get("seconds")
            if isinstance(seconds, int | float) and seconds > 0:
                saves.append((ts - float(seconds), ts))
            continue
        stage = _stage_of(e, current)
        if stage != current:
            changes.append((ts, stage))
            current = stage
    ends = [ts for ts, _ in changes[1:]] + [now]
    spans = [StageSpan(start, end, stage) for (start, stage), end in
             zip(changes, ends[:len(changes)], strict=True)
             if stage is not None and end > start]
    return tuple(_cut_in(spans, saves))


def _cut_in(spans: list[StageSpan], saves: list[tuple[float, float]]) -> list[StageSpan]:
    """`spans` with each checkpoint save laid over the stage it interrupted."""
    out = spans
    for lo, hi in saves:
        cut = []
        for span in out:
            if span.stage == CHECKPOINT_STAGE or hi <= span.start or lo >= span.end:
                cut.append(span)
                continue
            if span.start < lo:
                cut.append(StageSpan(span.start, lo, span.stage))
            cut.append(StageSpan(max(lo, span.start), min(hi, span.end), CHECKPOINT_STAGE))
            if hi < span.end:
                cut.append(StageSpan(hi, span.end, span.stage))
        out = cut
    return out


def band_cells(spans: Sequence[StageSpan], lo: float, hi: float,
               width: int) -> list[str | None]:
    """The stage each of `width` cells of time from `lo` to `hi` shows: of the stages
    that touch it, the most telling (`STAGES` order; a stage not listed there, after
    them); None where the job ran no process."""
    if width <= 0:
        return []
    cells: list[str | None] = [None] * width
    span_of_cell = (hi - lo) / width if hi > lo else 0.0
    rank = {stage: i for i, stage in enumerate(STAGES)}
    for span in spans:
        if span_of_cell <= 0:
            first = last = width - 1
        else:
            first = max(0, int((span.start - lo) / span_of_cell))
            last = min(width - 1, int((span.end - lo) / span_of_cell - 1e-9))
        for i in range(first, last + 1):
            held = cells[i]
            if held is None or rank.get(span.stage, len(STAGES)) < rank.get(held,
                                                                             len(STAGES)):
                cells[i] = span.stage
    return cells
