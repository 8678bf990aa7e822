"""Drill-down data: what `Source.details(what, **kw)` returns, one dataclass per screen.

Plain frozen data like the snapshot (no store handles), so it crosses the worker/UI
thread boundary safely and renders generically: scalar fields as a key/value table,
tuples of records as tables, `Series` as sparklines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agent.wire.events import JOB_EXITED, JOB_STARTED
from cockpit.analysis.alert_config import current as limits
from cockpit.analysis.gpu_state import link_down
from cockpit.analysis.lifecycle import current_run_started, dict_field
from cockpit.analysis.lr import scale_in_force
from cockpit.analysis.markers import MARKER_KINDS, chart_markers
from cockpit.read.diff_report import diff_summary
from cockpit.read.kpis_report import kpi_summary
from cockpit.snapshot import EventRow, Series
from cockpit.store.queries import StoreReader
from cockpit.transport.states import STALE, STREAMING, UNKNOWN

# What a drill-down screen may ask `Source.details` for; each kind has its dataclass here
# (`Details`), which a fixed source (the demo) may stand in for with plain data.
DetailKind = Literal["host", "events", "run", "log", "compare"]
DETAIL_KINDS: tuple[DetailKind, ...] = ("host", "events", "run", "log", "compare")


@dataclass(frozen=True)
class GpuNow:
    gpu: int
    name: str | None
    simulated: bool
    online: bool
    util: float | None = None
    mem_util: float | None = None
    temp: float | None = None
    power: float | None = None
    power_limit: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    sm_clock: int | None = None
    mem_clock: int | None = None
    fan: float | None = None
    throttle: int | None = None
    ecc_unc: int | None = None
    ecc_agg_unc: int | None = None
    retired_pages: int | None = None
    pcie_tx: float | None = None
    pcie_rx: float | None = None
    nvlink_err: int | None = None
    xid: int | None = None


@dataclass(frozen=True)
class ProcessRow:
    pid: int | None
    rank: int | None
    gpu: int | None  # device the process holds memory on (None: CPU-side only)
    gpu_mem: int | None
    cpu: float | None
    rss: int | None
    state: str | None
    fds: int | None


@dataclass(frozen=True)
class HostDetail:
    host: str
    state: str | None
    gpu_state: str | None
    gpu_source: str | None
    hostname: str | None
    driver: str | None
    agent_version: str | None
    cpu_count: int | None
    mem_total: int | None
    last_seen: float | None
    gpus: tuple[GpuNow, ...] = ()
    processes: tuple[ProcessRow, ...] = ()
    # History over time, banded over the host's GPUs (lo/hi = coolest/hottest GPU …).
    gpu_util: Series = field(default_factory=Series)
    gpu_temp: Series = field(default_factory=Series)
    gpu_power: Series = field(default_factory=Series)
    gpu_mem_used: Series = field(default_factory=Series)
    cpu: Series = field(default_factory=Series)
    util_per_gpu: dict[str, Series] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EventsTimeline:
    events: tuple[EventRow, ...] = ()
    kinds: tuple[str, ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class LogLine:
    ts: float
    host: str
    rank: int | None
    stream: str | None
    line: str


@dataclass(frozen=True)
class LogTail:
    lines: tuple[LogLine, ...] = ()
    text: str | None = None


@dataclass(frozen=True)
class RunInfo:
    job: str | None
    declared: bool = False  # a `run` record was seen (else only what the steps show)
    started: float | None = None  # its first launch
    # When the run the panes show started: its newest start (a recovery, a relaunch, a
    # resume), `started` when it never started again.
    run_started: float | None = None
    # The LR now: the lowest rank's newest record's, and the operator's scale in force.
    lr: float | None = None
    lr_scale: str | None = None
    total_steps: int | None = None
    total_epochs: int | None = None
    total_samples: int | None = None
    total_tokens: int | None = None
    world_size: int | None = None
    seed: int | None = None
    data_version: str | None = None
    git_commit: str | None = None
    flops_per_step: float | None = None
    peak_flops: float | None = None
    stages: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)  # host -> environment fingerprint
    jobs: tuple[str, ...] = ()  # every job in the recording
    # A git commit, data version or seed declared again with another value (a restart on
    # other code): {field, old, new, ts, host}, oldest first.
    changes: tuple[dict[str, Any], ...] = ()
    # A fork: its parent job and the step of the checkpoint it started from.
    forked_from: dict[str, Any] | None = None
    # Its KPIs (`cockpit.read.kpis_report.kpi_rows`: utilization, lost time by cause, MTTR,
    # turnaround, GPU-hours per week) and what changed from its parent or previous run
    # (`cockpit.read.diff_report.diff_summary`; empty when it has neither).
    kpis: dict[str, str] = field(default_factory=dict)
    compared: dict[str, str] = field(default_factory=dict)


# --- building them from the store ------------------------------------------------------


Details = HostDetail | EventsTimeline | RunInfo | LogTail  # by DetailKind: host, events, run, log


def event_row(e: Mapping[str, Any]) -> EventRow:
    return EventRow(ts=float(e["ts"]), host=str(e["host"]), kind=str(e.get("kind") or ""),
                    msg=str(e.get("msg") or ""), step=e.get("step"))


# Every rank reports its own stage change ("stage train started"): the same words from
# one host within this many seconds are one event to an operator.
SAME_EVENT_S = 5.0


def event_rows(events: Iterable[Mapping[str, Any]]) -> tuple[EventRow, ...]:
    """The events (in their order) as rows, repeats from several ranks folded into one."""
    rows: list[EventRow] = []
    for row in map(event_row, events):
        last = rows[-1] if rows else None
        if (last is not None and (last.host, last.kind, last.msg, last.step)
                == (row.host, row.kind, row.msg, row.step)
                and abs(row.ts - last.ts) <= SAME_EVENT_S):
            rows[-1] = replace(last, count=last.count + 1)
        else:
            rows.append(row)
    return tuple(rows)


def host_detail(reader: StoreReader, host: str, *, until_ts: float | None = None,
                buckets: int = 120) -> HostDetail:
    """Per-GPU latest values, GPU/CPU history and the job processes of one host."""
    facts = next((h for h in reader.hosts(until_ts=until_ts) if h["host"] == host), None)
    if facts is None:
        raise ValueError(f"no host named {host!r} in this recording")
    gpus = [g for g in reader.latest_gpus(until_ts=until_ts) if g["host"] == host]
    sample = next(
        (s for s in reader.latest_host_samples(until_ts=until_ts) if s["host"] == host), None
    )
    xids: dict[Any, int] = {}
    for e in sorted(reader.gpu_events(until_ts=until_ts), key=lambda e: e["ts"]):
        data = dict_field(e, "data")
        if e["host"] == host and isinstance(data.get("xid"), int):
            xids[data.get("gpu")] = data["xid"]
    inventory = {g.get("index"): g for g in facts["gpus"] if isinstance(g, dict)}
    sampled = {g["gpu"]: g for g in gpus}
    state = facts.get("state") if until_ts is None else link_state(
        facts, None, until_ts, replaying=True, ended=recording_ended(reader, until_ts))
    # A lost host's GPUs are not online, whatever their last samples (`gpus_online`).
    lost = isinstance(state, str) and link_down(state)
    cells = []
    for index in sorted(set(inventory) | set(sampled), key=lambda i: (i is None, i)):
        inv, g = inventory.get(index, {}), sampled.get(index, {})
        cells.append(GpuNow(
            gpu=int(index) if index is not None else -1,
            name=inv.get("name"),
            simulated=bool(g.get("sim") or inv.get("simulated")),
            online=bool(g) and not lost,
            util=g.get("util"), mem_util=g.get("mem_util"), temp=g.get("temp"),
            power=g.get("power"), power_limit=g.get("power_limit"),
            mem_used=g.get("mem_used"), mem_total=g.get("mem_total") or inv.get("mem_total"),
            sm_clock=g.get("sm_clock"), mem_clock=g.get("mem_clock"), fan=g.get("fan"),
            throttle=g.get("throttle"), ecc_unc=g.get("ecc_vol_unc"),
            ecc_agg_unc=g.get("ecc_agg_unc"), retired_pages=g.get("retired_pages"),
            pcie_tx=g.get("pcie_tx"), pcie_rx=g.get("pcie_rx"), nvlink_err=g.get("nvlink_err"),
            xid=xids.get(index),
        ))

    def history(table: str, column: str, **where: Any) -> Series:
        return reader.series(table, column, where={"host": host, **where}, x="ts",
                             buckets=buckets, until_ts=until_ts)

    return HostDetail(
        host=host,
        state=state,
        gpu_state=facts.get("gpu_state"),
        gpu_source=facts.get("gpu_source"),
        hostname=facts.get("hostname"),
        driver=facts.get("driver"),
        agent_version=facts.get("agent_version"),
        cpu_count=facts.get("cpu_count"),
        mem_total=facts.get("mem_total"),
        last_seen=facts.get("last_seen"),
        gpus=tuple(cells),
        processes=_processes(sample, gpus),
        gpu_util=history("gpu", "util"),
        gpu_temp=history("gpu", "temp"),
        gpu_power=history("gpu", "power"),
        gpu_mem_used=history("gpu", "mem_used"),
        cpu=history("host_sample", "cpu"),
        util_per_gpu={f"gpu {c.gpu}": history("gpu", "util", gpu=c.gpu) for c in cells},
        env=facts.get("env") or {},
    )


def link_state(host: Mapping[str, Any], host_states: Mapping[str, str] | None, now: float,
               replaying: bool, *, ended: bool = False) -> str:
    """The live transport's word when there is one; in a replay, what the records say,
    except at the recording's end (`ended`): the stored state is the link's there, as
    the report reads it (a session that closed its links stored "stopped"), and a
    recording that ended is not "streaming"; a host silent past `[alerts]`'
    `host_silent_s` is "stale" (the silent-host alert's limit)."""
    if host_states and host["host"] in host_states:
        return host_states[host["host"]]
    if (not replaying or ended) and host.get("state"):
        return str(host["state"])
    last = host.get("last_seen")
    if last is None:
        return UNKNOWN
    return STALE if now - last > limits().host_silent_s else STREAMING


def recording_ended(reader: StoreReader, until_ts: float | None) -> bool:
    """Whether a cursor at `until_ts` has reached the recording's last record (None:
    the whole recording is read, as at its end)."""
    if until_ts is None:
        return True
    span = (reader.memo("time_range", None, reader.time_range) if reader.static
            else reader.time_range())  # a read-only store's span cannot change
    return span is not None and until_ts >= span[1]


def _processes(sample: Mapping[str, Any] | None,
               gpus: Sequence[Mapping[str, Any]]) -> tuple[ProcessRow, ...]:
    """Job processes from the host sample, joined by pid with GPU memory holders."""
    on_gpu: dict[Any, tuple[int, int | None]] = {}
    for g in gpus:
        for p in g.get("procs") or []:
            if isinstance(p, dict) and p.get("pid") is not None:
                on_gpu[p["pid"]] = (g["gpu"], p.get("mem"))
    rows = []
    seen = set()
    host_procs = (sample or {}).get("procs") or []
    for p in host_procs:
        if not isinstance(p, dict):
            continue
        gpu, mem = on_gpu.get(p.get("pid"), (None, None))
        seen.add(p.get("pid"))
        rows.append(ProcessRow(pid=p.get("pid"), rank=p.get("rank"), gpu=gpu, gpu_mem=mem,
                               cpu=p.get("cpu"), rss=p.get("rss"), state=p.get("state"),
                               fds=p.get("fds")))
    for g in gpus:
        for p in g.get("procs") or []:
            if isinstance(p, dict) and p.get("pid") not in seen:
                seen.add(p.get("pid"))
                rows.append(ProcessRow(pid=p.get("pid"), rank=p.get("rank"), gpu=g["gpu"],
                                       gpu_mem=p.get("mem"), cpu=None, rss=None, state=None,
                                       fds=None))
    return tuple(sorted(rows, key=lambda r: (r.rank is None, r.rank or 0, r.pid or 0)))


def events_timeline(reader: StoreReader, *, until_ts: float | None = None,
                    kinds: Sequence[str] | None = None, text: str | None = None,
                    limit: int = 500, job: str | None = None) -> EventsTimeline:
    rows = reader.events(until_ts=until_ts, kinds=kinds, text=text, limit=limit, job=job)
    return EventsTimeline(events=event_rows(rows),
                          kinds=tuple(kinds or ()), text=text)


def log_tail(reader: StoreReader, *, until_ts: float | None = None, n: int = 500,
             text: str | None = None, job: str | None = None) -> LogTail:
    rows = reader.logs(job, until_ts=until_ts, limit=n, text=text)
    return LogTail(
        lines=tuple(LogLine(ts=float(r["ts"]), host=str(r["host"]), rank=r.get("rank"),
                            stream=r.get("stream"), line=str(r.get("line") or ""))
                    for r in rows),
        text=text,
    )


def run_info(reader: StoreReader, *, until_ts: float | None = None,
             job: str | None = None) -> RunInfo:
    jobs = tuple(reader.jobs(until_ts=until_ts))
    job = job or reader.current_job(until_ts=until_ts)
    if job is None:
        return RunInfo(job=None, jobs=jobs)
    info = reader.run_info(job, until_ts=until_ts)
    current = current_run_started(
        e for e in reader.rare_events((JOB_STARTED, JOB_EXITED), job, until_ts)
        if e.get("job") == job)
    latest = [r for r in reader.latest_train(job, until_ts=until_ts) if r.get("lr") is not None]
    newest = min(latest, key=lambda r: (r["rank"] is None, r["rank"]), default=None)
    markers = chart_markers(e for e in reader.rare_events(MARKER_KINDS, job, until_ts)
                            if e.get("job") in (job, None))
    return RunInfo(
        job=job,
        declared=bool(info.get("declared")),
        started=info.get("started"),
        run_started=info.get("started") if current is None else current,
        lr=newest["lr"] if newest is not None else None,
        lr_scale=scale_in_force(markers),
        total_steps=info.get("total_steps"),
        total_epochs=info.get("total_epochs"),
        total_samples=info.get("total_samples"),
        total_tokens=info.get("total_tokens"),
        world_size=info.get("world_size"),
        seed=info.get("seed"),
        data_version=info.get("data_version"),
        git_commit=info.get("git_commit"),
        flops_per_step=info.get("flops_per_step"),
        peak_flops=info.get("peak_flops"),
        stages=tuple(info.get("stages") or ()),
        tags=tuple(info.get("tags") or ()),
        config=dict_field(info, "config"),
        env=info.get("env") or {},
        jobs=jobs,
        changes=tuple(info.get("changes") or ()),
        forked_from=info.get("forked_from"),
        kpis=kpi_summary(reader, job, until_ts),
        compared=diff_summary(reader, job, info.get("forked_from"), jobs, until_ts),
    )
