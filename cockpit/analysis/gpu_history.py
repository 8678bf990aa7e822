"""A GPU's fault history across runs of a job: a GPU that raised XIDs or counted
uncorrectable ECC errors before the current run began (an earlier run, a relaunch, the
parent of a fork) is flagged in this one, so the operator sees the suspect GPU before it
fails the job again, not only after.

The XIDs come from the recording (`StoreReader.xid_history`: they belong to the GPU, not
to a job); the ECC history is NVML's own lifetime counter of uncorrectable errors, which
a GPU reset or a reboot keeps while the volatile count the Health pane shows starts over.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.wire import launch_reasons
from agent.wire.events import JOB_STARTED
from cockpit.analysis.lifecycle import event_data
from cockpit.analysis.text import counted, where_text
from cockpit.snapshot import Alert, GpuCell, HostHealth

# s between the hosts' starts of one launch (each journals its own, on its own clock).
SAME_RUN_S = 60.0


def run_began(lifecycle: Sequence[Mapping[str, Any]], fallback: float | None) -> float | None:
    """When the job's current run began: its newest `job_started` of a new run (the
    hosts of one launch each journal one: the first of the newest group counts), else
    `fallback` (when the job first declared itself)."""
    starts = sorted(float(e["ts"]) for e in lifecycle
                    if e.get("kind") == JOB_STARTED and e.get("ts") is not None
                    and event_data(e).get("reason") in launch_reasons.RUN_STARTS)
    if not starts:
        return fallback
    began = starts[-1]
    for ts in reversed(starts):  # the other hosts' starts of the same launch
        if began - ts > SAME_RUN_S:
            break
        began = ts
    return began


def history_alerts(hosts: Iterable[HostHealth], ts: float) -> list[Alert]:
    """A warning per GPU with XIDs before the current run began, or with uncorrectable
    ECC errors in its lifetime that the volatile count no longer shows (those it does
    show already raise `ecc_uncorrected`)."""
    out = []
    for host in hosts:
        for cell in host.gpus:
            earlier = cell.xid_earlier > 0
            ecc = (cell.ecc_lifetime or 0) > 0 and not (cell.ecc_unc or 0) > 0
            if not (earlier or ecc):
                continue  # most GPUs have no past: no words made for them
            where = where_text({"host": host.host, "gpu": cell.index})
            drain = (f"if it faults again, relaunch without the host (`cockpit relaunch "
                     f"SPEC --exclude {host.host}`) and reset or replace the GPU")
            if earlier:
                codes = ", ".join(str(c) for c in cell.xid_codes)
                out.append(Alert(
                    ts=cell.xid_earlier_last if cell.xid_earlier_last is not None else ts,
                    kind="resource", severity="warning", code="gpu_fault_history",
                    where=where,
                    what=(f"GPU {cell.index} raised {counted(cell.xid_earlier, 'XID')} "
                          f"before this run began (codes {codes})"),
                    hint=f"it failed an earlier run of this job: watch it; {drain}"))
            if ecc:
                out.append(Alert(
                    ts=ts, kind="resource", severity="warning", code="gpu_ecc_history",
                    where=where,
                    what=(f"GPU {cell.index} counted {cell.ecc_lifetime} uncorrectable ECC "
                          "errors in its lifetime, none since its last reset"),
                    hint=f"its memory failed before: {drain}"))
    return out


def xid_label(cell: GpuCell) -> str | None:
    """The GPU's newest XID, and how many came before the current run began: "79 (2
    before this run)"; None without any."""
    if cell.xid is None:
        return None
    return f"{cell.xid}" + (f" ({cell.xid_earlier} before this run)" if cell.xid_earlier else "")
