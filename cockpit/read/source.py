"""Where snapshots come from: the `Source` interface and `build_snapshot`.

Live and replay are both `Source`s over the same store; `build_snapshot` turns the
store (read through `StoreReader`, at a cursor) and the analysis rules into one frozen
`Snapshot`, so the UI has a single render path and the report prints the same figures.
The cost of a snapshot does not grow with the run: latest values are read from recent
windows, step statistics from a bounded step range, and every series is downsampled
in SQL to `buckets` points, the reference rank's four step series in one statement.
Where every table ends at the cursor is found once per snapshot
(`StoreReader.frontiers`), and every read is remembered on the reader under the
frontiers of the tables it looks at, so it is redone only when one of them gains a
visible row: a refresh with nothing new (a finished run, a paused replay, a quiet
fleet) reads almost nothing, and a refresh after a training step reads the rows that
step added and folds them into what it holds (the series, the newest samples, the
recent steps: `cockpit.read.train_tail`, `ReaderBase.added_after`), not the events,
evaluations or run facts. A new event is read once and folded into the newest events;
the answers about some kinds of event are read again only when one of their kinds came
(`ReaderBase.event_version`: a GPU's XID leaves the job's lifecycle as it was read). The
reads that do not depend on one another run side by side in a small pool (DuckDB
releases the GIL while it executes).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from operator import itemgetter
from typing import Any

from agent.wire import states
from agent.wire.events import (
    CHECKPOINT_SAVED,
    DROPPED,
    FORK,
    INTERRUPTION,
    JOB_STARTED,
    SPOOL_ERROR,
)
from cockpit.analysis import alerts as rules
from cockpit.analysis import signal_alerts
from cockpit.analysis.checkpoint_interval import advise
from cockpit.analysis.eta import restart_aware
from cockpit.analysis.gpu_history import history_alerts, run_began
from cockpit.analysis.incidents import merge_incidents
from cockpit.analysis.lifecycle import (
    ENDED_STATES,
    event_data,
    process_starts,
)
from cockpit.analysis.rank_progress import rank_progress
from cockpit.analysis.stalls import detect_stall
from cockpit.read.agent_alerts import standing_agent_alerts
from cockpit.read.compare import Comparison, compare_in_recording
from cockpit.read.details import (
    DETAIL_KINDS,
    DetailKind,
    Details,
    event_rows,
    events_timeline,
    host_detail,
    log_tail,
    recording_ended,
    run_info,
)
from cockpit.read.effect import (
    build_effect,
    fault_markers,
    nonfinite_steps,
    train_series,
)
from cockpit.read.efficiency import (
    build_efficiency,
    efficiency_figures,
    lagging_note,
    rank0_alone_until,
    rank0_note,
    whole_job,
)
from cockpit.read.health import (
    build_health,
    first_wire_errors,
    host_pressure,
    link_rows,
    peak_memory,
)
from cockpit.read.progress import (
    ACTIVE_STATES,
    build_progress,
    job_reading,
    lifecycle_events,
    observed_seconds,
    resume_step,
    stages,
)
from cockpit.read.seams import SNAPSHOT_BUCKETS, Controller, Source
from cockpit.read.slurm_state import screen_state
from cockpit.read.train_tail import TrainTail, TrainView, job_hosts, job_lifecycle
from cockpit.snapshot import (
    Alert,
    Effect,
    Interruption,
    Series,
    Snapshot,
)
from cockpit.store.queries import Frontiers, StoreReader
from cockpit.store.queries_base import Row, of_kinds
from cockpit.store.queries_events import INTERRUPTION_KINDS
from cockpit.store.queries_train import NonFinite

__all__ = [
    "DETAIL_KINDS",
    "SNAPSHOT_BUCKETS",
    "Controller",
    "Source",
    "build_snapshot",
    "details",
    "observed_seconds",
]

EVENTS_SHOWN = 50
DATA_EVENT_KINDS = (SPOOL_ERROR, DROPPED)
DATA_EVENTS_READ = 500
# The events the run facts read (`StoreReader.run_info`: when the job started, what it
# was forked from); other events leave them as they were read.
RUN_INFO_KINDS = (JOB_STARTED, FORK)
READ_THREADS = 4  # store reads of one snapshot that may run at once (see `_read_pool`)


def _incidents(reader: StoreReader, job: str, until_ts: float | None) -> list[Any]:
    """The job's incidents, noting on the reader (`_awaits_a_step`) whether one is not
    over yet while some host still works on it: the job's next step ends it
    (`merge_incidents`), so only then do new train rows key the memo again. An outage
    every host gave up on waits for the operator, whose start is an event: re-reading it
    at every step of other jobs would scan their rows since the failure each time."""
    items = reader.interruptions(job, until_ts=until_ts)
    merged = merge_incidents(items)
    pending = any(i.get("recovered_at") is None and not i.get("ended_by")
                  and not i.get("gave_up") for i in items)
    reader.remember("incidents-await-a-step", job, pending and any(
        i.get("recovered_in") is None and not i.get("ended_by") for i in merged))
    return merged


def _awaits_a_step(reader: StoreReader, job: str) -> bool:
    held = reader.recall("incidents-await-a-step")
    return held is not None and held[0] == job and bool(held[1])


def details(
    reader: StoreReader, what: DetailKind, *, until_ts: float | None = None, **kw: Any
) -> Details | Comparison:
    """Drill-down data for `Source.details`: "host" (host=NAME), "events" (kinds, text,
    limit), "run", "log" (n, text), "compare" (job)."""
    if what == "host":
        host = kw.get("host")
        if not isinstance(host, str) or not host:
            raise ValueError('details("host") needs host=NAME')
        return host_detail(reader, host, until_ts=until_ts, buckets=int(kw.get("buckets", 120)))
    if what == "events":
        return events_timeline(reader, until_ts=until_ts, kinds=kw.get("kinds"),
                               text=kw.get("text"), limit=int(kw.get("limit", 500)),
                               job=kw.get("job"))
    if what == "run":
        return run_info(reader, until_ts=until_ts, job=kw.get("job"))
    if what == "log":
        return log_tail(reader, until_ts=until_ts, n=int(kw.get("n", 500)),
                        text=kw.get("text"), job=kw.get("job"))
    if what == "compare":  # the job on screen beside its parent or earlier run
        return compare_in_recording(reader, reader.recording_name(), kw.get("job"),
                                    until_ts=until_ts)
    raise ValueError(f"unknown details kind {what!r}; expected one of {', '.join(DETAIL_KINDS)}")


def _names_a_new_job(reader: StoreReader) -> Callable[[Row], bool]:
    """Whether an event or evaluation added since the jobs were read names a job they
    do not hold: only that changes the recording's jobs (each job's first record is
    older than any row added)."""
    held = reader.recall("jobs")
    known = frozenset(held[1]) if held is not None else frozenset()
    return lambda row: row.get("job") is not None and row["job"] not in known


def _newest_per_host(*groups: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The newest ts per host among rows the snapshot already holds."""
    newest: dict[str, float] = {}
    held = newest.get
    for rows in groups:
        try:  # a fleet's GPU rows: a thousand, each with both (a store read's rows)
            pairs = list(map(_HOST_TS, rows))
        except KeyError:
            pairs = [(r["host"], r.get("ts")) for r in rows]
        for host, ts in pairs:
            if ts is not None:
                old = held(host)
                if old is None or ts > old:
                    newest[host] = ts
    return newest


_HOST_TS = itemgetter("host", "ts")


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _read_pool() -> ThreadPoolExecutor:
    """Threads for a snapshot's independent store reads, shared by every source."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=READ_THREADS,
                                       thread_name_prefix="snapshot-read")
        return _POOL


def _first_seen(reader: StoreReader, job: str | None, alerts: Sequence[Alert],
                at: float) -> list[Alert]:
    """Alerts dated now, for want of a better time (the loss findings: spikes, divergence,
    LR), keep the time they were first found: re-dated at every refresh they read as
    new. A condition that ends is forgotten, so one that comes back is dated anew. Live
    only: a replay or a report dates them at its cursor, the same on every read."""
    held = reader.recall("alerts_first_seen")
    seen: dict[tuple[str, str], float] = dict(held[1]) if held and held[0] == job else {}
    out = []
    for alert in alerts:
        key = (alert.code, alert.where)
        if alert.ts == at:
            first = seen.get(key)
            if first is not None and first <= at:
                alert = dataclasses.replace(alert, ts=first)
            else:
                seen[key] = at
        out.append(alert)
    live = {(a.code, a.where) for a in alerts}
    reader.remember("alerts_first_seen", job, {k: v for k, v in seen.items() if k in live})
    return out


def _signal_alerts(reader: StoreReader, job: str | None, until_ts: float | None,
                   fr: Frontiers, train: TrainView, series: Mapping[str, Series],
                   effect: Effect, incidents: Sequence[Interruption], at: float
                   ) -> list[Alert]:  # fmt: skip
    """Each interruption with its cause, where and what to try (resolved ones too), and
    the slow training signals (loss scale, gradient norm, plateau)."""
    if job is None:
        return []
    events = [e for e in lifecycle_events(reader, job, fr, until_ts)
              if e.get("kind") == INTERRUPTION and e.get("job") == job]
    memory: dict[str, tuple[float, float] | None] = {}  # None: no GPU memory recorded
    for e in events:
        if event_data(e).get("cause") == "oom" and e.get("host"):
            host, when = str(e["host"]), float(e.get("ts") or at)
            memory[host] = reader.memo(f"oom-memory:{host}:{when}", when,
                                       functools.partial(peak_memory, reader, host, when))
    micro = [int(r["samples"]) // max(int(r.get("steps") or 1), 1) for r in train.latest
             if isinstance(r.get("samples"), int) and r["samples"] > 0]
    return [
        *signal_alerts.interruption_alerts(
            events, incidents, now=at, micro_batch=max(micro) if micro else None,
            memory={h: m for h, m in memory.items() if m is not None}),
        *signal_alerts.loss_scale_alerts(series.get("loss_scale", Series()), now=at),
        *signal_alerts.grad_norm_alerts(series.get("grad_norm", Series()), now=at),
        *signal_alerts.plateau_alerts(effect.train_loss_ema, now=at),
    ]


def _before_any_record(reader: StoreReader, until_ts: float | None, label: str,
                       host_states: Mapping[str, str] | None, controllable: bool,
                       now: float | None) -> Snapshot:
    """No record yet: the hosts and their links are all there is, and they matter most
    then (a refused host key, a wrong port, a missing agent keep every record away)."""
    at = now if now is not None else (until_ts or 0.0)
    hosts = reader.hosts(until_ts=until_ts)
    health = build_health(hosts, (), (), (), (), host_states, at, replaying=until_ts is not None)
    rows = link_rows(hosts, health)
    return Snapshot(ts=at, source_label=label, job=None, health=health,
                    alerts=rules.merge(rules.host_alerts(rows, (), now=at), rules.rejected_alerts(
                        hosts, first_wire_errors(reader, hosts, until_ts))),
                    controllable=controllable)


def build_snapshot(
    reader: StoreReader,
    *,
    until_ts: float | None,
    label: str,
    buckets: int = SNAPSHOT_BUCKETS,
    host_states: Mapping[str, str] | None = None,
    controllable: bool = False,
    now: float | None = None,
    job: str | None = None,
) -> Snapshot:
    """The whole main screen at `until_ts` (None: everything recorded).

    `now` is the instant ages are measured from (time since the last step, stale hosts):
    by default the cursor, else the newest record; a live source may pass the wall clock.
    `job` is the operator's pick (`j`, `cockpit report --job`): shown while it is one of
    the recording's jobs, training or not (`TrainTail.job`).
    """
    # Over 80 lines: the one orchestration of a snapshot; the reads start side by side,
    # each instrument is built as its inputs arrive, and a failure waits for the reads
    # still running. Split, the pool's futures and the frontiers would pass through
    # every part.
    fr = reader.frontiers(until_ts=until_ts)
    frontier = fr.newest
    if frontier is None:
        return _before_any_record(reader, until_ts, label, host_states, controllable, now)
    at = now if now is not None else (until_ts if until_ts is not None else frontier)
    tail = reader.memo("train_tail", None, lambda: TrainTail(reader))
    training = tail.training(fr, until_ts)
    # An evaluation of a job already known (one every few hundred steps) is no new job:
    # keyed by the eval table's frontier, each read every job's records again.
    new_job = _names_a_new_job(reader)
    declared = reader.memo("jobs", (
        fr.key("run"), reader.rows_version("jobs", "eval", fr, until_ts, new_job),
        reader.event_version("jobs", fr, until_ts, new_job)),
        lambda: tuple(reader.jobs(until_ts=until_ts)))
    jobs = (*declared, *(j for j in training if j not in declared))
    job = tail.job(fr, until_ts, prefer=job, training=training, known=jobs)
    if job is not None and job not in jobs:
        jobs = (*jobs, job)
    run = reader.memo("run_info", (job, fr.key("run", "hello"), reader.event_version(
        "run_info", fr, until_ts, of_kinds(*RUN_INFO_KINDS))),
        lambda: reader.run_info(job, until_ts=until_ts)) if job else {}
    # The reads below do not depend on one another's answers: DuckDB runs them side by
    # side (it releases the GIL) while this thread reads the steps the panes build on.
    pool = _read_pool()
    gpus_f = pool.submit(reader.memo, "gpus", fr.key("gpu"),
                         lambda: reader.latest_gpus(until_ts=until_ts, frontiers=fr))
    host_samples_f = pool.submit(
        reader.memo, "host_samples", fr.key("host_sample"),
        lambda: reader.latest_host_samples(until_ts=until_ts, frontiers=fr))
    nonfinite_f = pool.submit(nonfinite_steps, reader, job, until_ts, fr) if job else None
    reads: list[Future[Any]] = [f for f in (gpus_f, host_samples_f, nonfinite_f) if f is not None]
    try:
        world: Any = run.get("world_size")  # as the run record says: checked where used
        kept_from = rank0_alone_until(reader, job, world, until_ts)
        # Before the other ranks' kept steps, rank 0 is all there is to find.
        train = (tail.view(job, 1, fr, until_ts) if kept_from is not None
                 else tail.view(job, world, fr, until_ts, run.get("world_since")))
        if kept_from is not None:  # then `world` is a count above 1 (rank0_alone_until)
            train = whole_job(train, world)
        # The job's GPUs' history, as the GPU busy figure is theirs (`efficiency_figures`):
        # on a shared fleet the other hosts' GPUs are not this job's. Every GPU where no
        # rank has reported yet.
        hosts_of_job = job_hosts(train)
        busy_f = pool.submit(
            reader.series_columns_held, "gpu_busy", "gpu", ("util",),
            where={"host": hosts_of_job} if hosts_of_job else {}, x="ts", buckets=buckets,
            until_ts=until_ts, frontiers=fr)
        reads.append(busy_f)
        series = train_series(reader, job, train, until_ts, buckets, fr)
        gpus = gpus_f.result()
        host_samples = host_samples_f.result()
        hosts = reader.hosts(until_ts=until_ts, frontiers=fr,
                             recent=_newest_per_host(gpus, host_samples, train.latest))
        state, qualified = job_reading(reader, job, until_ts,
                                       float(train.newest["ts"]) if train.newest else None, fr)
        # A Slurm job waiting in the queue says so, with Slurm's reason (docs/slurm.md).
        read_state, state = state, screen_state(reader, job, until_ts, fr, state)
        if state != read_state:
            qualified = None  # the note qualified the state the queue's replaced
        figures = reader.memo(
            "figures", (job, run.get("world_size"), run.get("world_since"),
                        run.get("flops_per_step"), run.get("peak_flops"),
                        fr.key("train", "gpu"), kept_from),
            lambda: efficiency_figures(run, train, gpus, world if kept_from is not None else None))
        stall = detect_stall(
            since_last_step=(at - float(train.newest["ts"])) if train.newest else None,
            recent_wall_times=train.walls,
            steps_per_record=train.record_steps,
            ranks=figures.ranks,
            steps=train.samples,
            hosts=host_pressure(hosts, host_samples, gpus, of_hosts=hosts_of_job),
            active=state in ACTIVE_STATES,
        )
        progress = build_progress(run, train, at, state, stall,
                             resume_step(job_lifecycle(reader, job, fr, until_ts))
                             if job is not None and state == states.PAUSED else None,
                             lifecycle_events(reader, job, fr, until_ts)
                             if job is not None and state in (states.EXITED, states.FAILED) else (),
                             qualified)
        nonfinite = nonfinite_f.result() if nonfinite_f is not None else NonFinite()
        found = build_effect(reader, job, train, until_ts, buckets, fr, series, nonfinite)
        efficiency = build_efficiency(train, figures, series, busy_f.result()[0],
                                 rank0_note(kept_from, world) if kept_from is not None
                                 else lagging_note(train, figures, world))
        others = [j for j in training if j != job]
        if progress.state in ENDED_STATES and others:
            # The hosts' GPUs now work for another job: their use is not this one's.
            efficiency = dataclasses.replace(
                efficiency, gpu_busy=None, gpu_busy_level=None,
                note=efficiency.note or f"GPU busy not shown: job {job} is {progress.state} "
                                        f"and the hosts' GPUs now serve {', '.join(others)}")
    except BaseException:
        # The store cannot close while a read still runs (a damaged file fails one read
        # and the caller closes it): let the others finish before passing the error on.
        wait(reads)
        raise
    xids = reader.gpu_events_held(until_ts=until_ts, frontiers=fr)
    interruptions = reader.memo(
        "interruptions", (job, reader.event_version("interruptions", fr, until_ts,
                                                    of_kinds(*INTERRUPTION_KINDS)),
                          # an outage no recovery ended is over at the job's next step
                          fr.key("train") if _awaits_a_step(reader, job) else None),
        lambda: _incidents(reader, job, until_ts)) if job else []
    # Every GPU's XIDs over the recording, split at the start of the job's current run:
    # a GPU that failed an earlier run (a relaunch, a fork's parent) is flagged in this.
    began = run_began(lifecycle_events(reader, job, fr, until_ts),
                      run.get("started")) if job is not None else None
    xid_history = reader.xid_history_held(until_ts=until_ts, before_ts=began, frontiers=fr)
    health = build_health(hosts, gpus, host_samples, xids, interruptions, host_states, at,
                     replaying=until_ts is not None,
                     ended=until_ts is not None and recording_ended(reader, until_ts),
                     xid_history=xid_history)
    if job is not None:
        checkpoints = reader.memo(
            "checkpoint_costs", (job, reader.event_version(
                "checkpoint_costs", fr, until_ts, of_kinds(CHECKPOINT_SAVED))),
            lambda: reader.checkpoint_costs(job, until_ts=until_ts))
        started = run.get("started") if isinstance(run, dict) else None
        first = reader.memo("first_ts", (job, fr.key("hello")),
                            lambda: (reader.time_range() or (at, at))[0])
        lifecycle = lifecycle_events(reader, job, fr, until_ts)
        advice = advise(
            checkpoint_seconds=[c["seconds"] for c in checkpoints],
            checkpoint_ts=[c["ts"] for c in checkpoints],
            interruptions=len(health.interruptions),
            observed_seconds=observed_seconds(lifecycle, job, started or first or at, at),
            starts=process_starts(lifecycle, job),
        )
        health = dataclasses.replace(health, checkpoint_advice=advice.text)
        # The ETA band with the restarts the measured interruption rate predicts (and,
        # while the job restarts, the rest of that restart): shown, not n/a, meanwhile.
        progress = restart_aware(progress, health.interruptions, now=at, run_seconds=(
            observed_seconds(lifecycle, job, started or first or at, at)))
    events = reader.events_held("events", until_ts=until_ts, limit=EVENTS_SHOWN,
                                frontiers=fr)
    data_events = reader.events_held("data_events", until_ts=until_ts,
                                     limit=DATA_EVENTS_READ, frontiers=fr,
                                     kinds=DATA_EVENT_KINDS)
    stored_alerts = standing_agent_alerts(reader, job, fr, until_ts)
    worst = max(figures.ranks, key=lambda r: r.data_share or 0.0, default=None)
    link_table = link_rows(hosts, health)
    # One timeline: the faults at the steps they hit, where each rank is, the stages.
    effect = dataclasses.replace(found.effect, faults=fault_markers(
        reader, job, train, link_table, until_ts, fr))
    progress = dataclasses.replace(progress, ranks=rank_progress(train.latest, figures.ranks),
                                   stages=stages(reader, job, at, until_ts, fr))
    alerts = rules.merge(
        stored_alerts,
        rules.gpu_alerts(gpus),
        rules.xid_alerts(xids),
        history_alerts(health.hosts, at),
        rules.host_alerts(link_table, host_samples, now=at),
        rules.data_alerts(
            data_wait_pct=figures.data_wait_pct,
            worst=(worst.rank, worst.host, worst.data_share or 0.0) if worst else None,
            events=data_events,
            now=at,
        ),
        rules.parameter_alerts(
            nonfinite_steps=found.effect.nonfinite_steps,
            nonfinite_count=found.effect.nonfinite_count,
            nonfinite_last=found.effect.nonfinite_last,
            nonfinite_since=nonfinite.since,
            spike_steps=found.effect.spike_steps,
            divergence=found.divergence, lr_reason=found.lr_reason, now=at,
        ),
        rules.interruption_alerts(health.interruptions, gave_up=state == states.FAILED),
        rules.run_change_alerts(run.get("changes") or ()),
        rules.rejected_alerts(hosts, first_wire_errors(reader, hosts, until_ts)),
        rules.stall_alerts(stall, now=at,
                           since=float(train.newest["ts"]) if train.newest else None),
        _signal_alerts(reader, job, until_ts, fr, train, series, found.effect,
                       health.interruptions, at),
    )
    if until_ts is None and not reader.static:  # live: a replay must read the same twice
        alerts = rules.merge(_first_seen(reader, job, alerts, at))
    return Snapshot(
        ts=at,
        source_label=label,
        job=job,
        jobs_training=training,
        jobs=jobs,
        progress=progress,
        effect=effect,
        efficiency=efficiency,
        health=health,
        alerts=alerts,
        events=event_rows(events),  # oldest first
        controllable=controllable,
    )
