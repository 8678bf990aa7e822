"""What the cockpit knows, as Prometheus / OpenMetrics metrics.

Teams that already watch Grafana should see a job there, not learn a second screen. The
exporter renders the same `Snapshot`s the panes and the report render (one per job), so
a figure in Grafana is the figure on the screen. Scrapes never touch the store: a
refresher thread (`MetricsRefresher`) builds the snapshots every few seconds and hands
them to `SnapshotCollector`, whose `collect()` only reads what it was handed. A slow
store can make the figures a few seconds old; it can never make a scrape wait on ingest,
or ingest wait on a scrape.

Conventions (docs/metrics.md lists every family): names start with `cockpit_`, units in
the name (`_seconds`, `_bytes`, `_ratio`, `_celsius`, `_watts`), counters end in
`_total`, percentages are exported as 0..1 ratios. Labels are only ever `training_job`, `host`,
`gpu`, `cause`, `kind`, `severity` and `state`: values from a bounded set (the jobs,
hosts and GPUs of the recording; the fixed vocabularies of causes, alert kinds and
states), never a step, a message or other free text, so the series count stays bounded.
Label values come from the wire: prometheus_client escapes them in the exposition, and
control characters are replaced here so a hostile host name cannot split a line. The
job label is `training_job`, not `job`: Prometheus sets `job` (and `instance`) on every
series it scrapes, to name the scrape target, and would rename ours `exported_job`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cockpit.analysis.causes import cause_label
from cockpit.analysis.gpu_state import gpus_online
from cockpit.analysis.kpis import JobKpis
from cockpit.analysis.text import printable
from cockpit.snapshot import Snapshot

PREFIX = "cockpit_"
# A host names jobs freely (a `run`, an event or a step under any name it likes), and a
# refresh builds a whole snapshot per job exported: thousands of names would be
# thousands of builds every few seconds. At most this many jobs are exported per
# refresh (`jobs_to_export`); `cockpit_jobs_not_exported` says how many were left out.
MAX_EXPORTED_JOBS = 16
# Label values are names from the inventory and the wire; a longer one is cut, not kept.
MAX_LABEL_CHARS = 128


def _label(value: object) -> str:
    return printable(value)[:MAX_LABEL_CHARS]


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


class _Families:
    """Metric families by name, created on first use with their help text and labels."""

    def __init__(self) -> None:
        self._by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def gauge(self, name: str, doc: str, labels: Mapping[str, object],
              value: float | int | None, unit: str = "") -> None:
        if value is None:
            return
        fam = self._by_name.get(name)
        if fam is None:
            fam = GaugeMetricFamily(PREFIX + name, doc, labels=list(labels), unit=unit)
            self._by_name[name] = fam
        fam.add_metric([_label(v) for v in labels.values()], float(value))

    def counter(self, name: str, doc: str, labels: Mapping[str, object],
                value: float | int | None) -> None:
        if value is None:
            return
        fam = self._by_name.get(name)
        if fam is None:
            fam = CounterMetricFamily(PREFIX + name, doc, labels=list(labels))
            self._by_name[name] = fam
        fam.add_metric([_label(v) for v in labels.values()], float(value))

    def all(self) -> list[Metric]:
        return list(self._by_name.values())


def _job_metrics(out: _Families, snap: Snapshot) -> None:
    job = {"training_job": snap.job or ""}
    p, e, f = snap.progress, snap.effect, snap.efficiency
    out.gauge("job_step", "Newest optimizer step recorded.", job, p.step)
    out.gauge("job_total_steps", "Steps the job declared it will run.", job, p.total_steps)
    out.gauge("job_progress_ratio", "Share of the declared steps done (0..1).", job,
              _ratio(p.percent))
    out.gauge("job_eta_seconds", "Estimated seconds to the last step, from recent speed.",
              job, p.eta_seconds)
    out.counter("job_samples", "Samples seen by the job (all ranks).", job, p.samples)
    out.counter("job_tokens", "Tokens seen by the job (all ranks).", job, p.tokens)
    out.gauge("job_steps_per_second", "Optimizer steps per second, recent.", job,
              p.steps_per_second)
    out.gauge("job_seconds_since_last_step", "Seconds since the newest step was recorded.",
              job, p.since_last_step)
    out.gauge("job_stalled", "1 while the job is stalled.", job, int(p.stalled))
    out.gauge("job_state", "1 for the job's current state.", {**job, "state": p.state}, 1)
    out.gauge("train_loss", "Newest training loss.", job, e.last_loss)
    out.gauge("val_loss", "Newest validation loss.", job, e.last_val_loss)
    out.gauge("learning_rate", "Newest learning rate the trainer recorded.", job, e.last_lr)
    out.gauge("loss_scale", "Newest AMP loss scale.", job, e.last_loss_scale)
    out.counter("nonfinite_steps", "Steps whose loss was NaN or Inf.", job, e.nonfinite_count)
    out.gauge("samples_per_second", "Samples per second, all ranks.", job, f.samples_per_s)
    out.gauge("tokens_per_second", "Tokens per second, all ranks.", job, f.tokens_per_s)
    out.gauge("gpu_busy_ratio", "Mean GPU busy share over the job's GPUs (0..1).", job,
              _ratio(f.gpu_busy))
    out.gauge("data_wait_ratio", "Share of step time spent waiting for data (0..1).", job,
              _ratio(f.data_wait_pct))
    out.gauge("communication_ratio", "Share of step time spent communicating (0..1).", job,
              _ratio(f.comm_pct))
    out.gauge("mfu_ratio", "Model FLOPs utilization (0..1), where FLOPs/step is known.",
              job, f.mfu)
    out.gauge("step_time_seconds", "Median step time over recent steps.", job,
              f.step_time_median)
    out.gauge("step_time_spread_ratio", "(slowest - fastest) / median rank step time.", job,
              f.step_time_spread)
    by_cause = Counter(cause_label(i.cause) for i in snap.health.interruptions)
    for cause, n in sorted(by_cause.items()):
        out.counter("job_interruptions", "Interruptions of the job, by classified cause.",
                    {**job, "cause": cause}, n)
    if snap.job is not None:
        restarts = [i.restart_count for i in snap.health.interruptions
                    if i.restart_count is not None]
        out.counter("job_restarts", "Automatic restarts of the job.", job,
                    max(restarts, default=0))
        out.counter("job_steps_lost", "Steps recomputed after interruptions.", job,
                    sum(i.steps_lost or 0 for i in snap.health.interruptions))
        recovered = [i.recovered_in for i in snap.health.interruptions
                     if i.recovered_in is not None]
        out.counter("job_recovery_seconds", "Seconds spent recovering from interruptions.",
                    job, sum(recovered))
    alerts = Counter((a.kind, a.severity) for a in snap.alerts)
    for (kind, severity), n in sorted(alerts.items()):
        out.gauge("alerts", "Alerts active now, by kind and severity.",
                  {**job, "kind": kind, "severity": severity}, n)


def _fleet_metrics(out: _Families, snap: Snapshot) -> None:
    for h in snap.health.hosts:
        host = {"host": h.host}
        out.gauge("host_link_state", "1 for the state of the cockpit's link to the host.",
                  {**host, "state": h.state}, 1)
        out.gauge("host_cpu_ratio", "Host CPU busy share (0..1).", host, _ratio(h.cpu))
        out.gauge("host_memory_used_bytes", "Host memory in use.", host, h.mem_used)
        out.gauge("host_memory_total_bytes", "Host memory installed.", host, h.mem_total)
        out.gauge("host_disk_used_bytes", "Disk used on the host's run dir filesystem.",
                  host, h.disk_used)
        out.gauge("host_disk_total_bytes", "Size of the host's run dir filesystem.", host,
                  h.disk_total)
        out.gauge("host_network_receive_bytes_per_second", "Host network receive rate.",
                  host, h.net_rx)
        out.gauge("host_network_transmit_bytes_per_second", "Host network transmit rate.",
                  host, h.net_tx)
        out.gauge("host_last_record_timestamp_seconds", "Time of the host's newest record.",
                  host, h.last_seen)
        for g, online in zip(h.gpus, gpus_online(h), strict=True):
            gpu = {**host, "gpu": g.index}
            out.gauge("gpu_online", "1 while the GPU answers.", gpu, int(online))
            out.gauge("gpu_simulated", "1 for a simulated GPU (demo and tests).", gpu,
                      int(g.simulated))
            out.gauge("gpu_utilization_ratio", "GPU SM busy share (0..1).", gpu,
                      _ratio(g.util))
            out.gauge("gpu_temperature_celsius", "GPU temperature.", gpu, g.temp)
            out.gauge("gpu_power_watts", "GPU power draw.", gpu, g.power)
            out.gauge("gpu_power_limit_watts", "GPU power limit.", gpu, g.power_limit)
            out.gauge("gpu_memory_used_bytes", "GPU memory in use.", gpu, g.mem_used)
            out.gauge("gpu_memory_total_bytes", "GPU memory installed.", gpu, g.mem_total)
            out.counter("gpu_ecc_uncorrected_errors", "Uncorrected ECC errors (volatile).",
                        gpu, g.ecc_unc)
            out.gauge("gpu_last_xid", "Most recent XID error code (0: none seen).", gpu,
                      g.xid if g.xid is not None else (
                          0 if online and g.xid_watched is not False else None))
            out.gauge("gpu_throttle_reasons", "NVML clock throttle reason bitmask.", gpu,
                      g.throttle)


def _kpi_metrics(out: _Families, k: JobKpis) -> None:
    job = {"training_job": k.job}
    out.gauge("job_gpus", "GPUs allocated to the job.", job, k.gpus)
    # Prometheus' base unit of time is the second: GPU-hours are exported as GPU-seconds.
    out.counter("job_gpu_seconds", "GPU-seconds allocated to the job.", job,
                k.gpu_hours * 3600.0)
    out.gauge("job_gpu_utilization_ratio",
              "Productive training time / allocated GPU time (0..1).", job, k.utilization)
    out.counter("job_productive_seconds", "Wall seconds of productive training.", job,
                k.productive_s)
    for cause, seconds in sorted(k.lost_s.items()):
        out.counter("job_lost_seconds", "Wall seconds lost, by cause.",
                    {**job, "cause": cause}, seconds)
    out.gauge("job_mttr_seconds", "Mean time to recovery.", job, k.mttr_s)
    out.counter("job_steps_recomputed", "Steps trained again after interruptions.", job,
                k.steps_recomputed)
    out.gauge("job_checkpoint_overhead_ratio", "Checkpoint stalls / allocated time (0..1).",
              job, k.checkpoint_share)
    out.gauge("job_turnaround_seconds", "Launch to the newest step.", job, k.turnaround_s)


def families(snapshots: Sequence[Snapshot],
             kpis: Mapping[str, JobKpis] | None = None) -> list[Metric]:
    """The metric families of `snapshots` (one per job; the fleet is taken from the
    first, since every job's snapshot shows the same hosts) and of the jobs' KPIs."""
    out = _Families()
    for snap in snapshots:
        if snap.job is not None:
            _job_metrics(out, snap)
    for k in (kpis or {}).values():
        _kpi_metrics(out, k)
    if snapshots:
        _fleet_metrics(out, snapshots[0])
        out.gauge("snapshot_timestamp_seconds", "Time of the newest record exported.", {},
                  snapshots[0].ts)
        out.gauge("jobs_not_exported",
                  f"Jobs of the recording left out of the export (at most "
                  f"{MAX_EXPORTED_JOBS} are exported).", {}, jobs_not_exported(snapshots))
    return out.all()


def _known_jobs(first: Snapshot) -> Iterator[str]:
    """Every job `first` knows of, in the order `jobs_to_export` takes them."""
    if first.job is not None:
        yield first.job
    yield from reversed(first.jobs_training)
    yield from reversed(first.jobs)


def jobs_to_export(first: Snapshot, limit: int = MAX_EXPORTED_JOBS) -> list[str]:
    """The jobs whose figures are exported, at most `limit` (a fixed set while nothing
    changes, so their series do not come and go): the job the panes show, then the jobs
    training now, the one started last first, then the others, the one that appeared
    last first (the recording's jobs are in order of first appearance)."""
    chosen: dict[str, None] = {}
    for job in _known_jobs(first):
        if len(chosen) >= limit:
            break
        chosen.setdefault(job)
    return list(chosen)


def jobs_not_exported(snapshots: Sequence[Snapshot]) -> int:
    """How many of the jobs the first snapshot knows of have no snapshot among them."""
    if not snapshots:
        return 0
    exported = {snap.job for snap in snapshots}
    return sum(1 for job in set(_known_jobs(snapshots[0])) if job not in exported)


@dataclass
class _Held:
    snapshots: tuple[Snapshot, ...] = ()
    kpis: Mapping[str, JobKpis] = field(default_factory=dict)
    built_at: float | None = None
    error: str | None = None


class SnapshotCollector(Collector):
    """Serves the snapshots it was last handed; never reads the store itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = _Held()

    def update(self, snapshots: Sequence[Snapshot], *, kpis: Mapping[str, JobKpis] | None = None,
               error: str | None = None) -> None:
        with self._lock:
            if error is None:
                self._held = _Held(tuple(snapshots), dict(kpis or {}), time.time(), None)
            else:  # keep the last good figures, and say they are old
                self._held = _Held(self._held.snapshots, self._held.kpis,
                                   self._held.built_at, error)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            held = self._held
        yield from families(held.snapshots, held.kpis)
        up = GaugeMetricFamily(PREFIX + "exporter_up",
                               "1 when the newest refresh of the figures succeeded.")
        up.add_metric([], 0.0 if held.error is not None or held.built_at is None else 1.0)
        yield up
        if held.built_at is not None:
            age = GaugeMetricFamily(PREFIX + "exporter_refreshed_timestamp_seconds",
                                    "When the exported figures were last built.")
            age.add_metric([], held.built_at)
            yield age


class MetricsRefresher:
    """Builds the jobs' snapshots every `interval` seconds on its own thread.

    `build` returns the snapshots (one per job exported: `jobs_to_export`); it runs
    here, off the scrape path and off the ingest path. A failing build keeps the
    previous figures and sets `cockpit_exporter_up` to 0 until a build succeeds again.
    """

    def __init__(self, build: Callable[[], Sequence[Snapshot]], collector: SnapshotCollector,
                 interval: float = 5.0,
                 kpis: Callable[[Sequence[Snapshot]], Mapping[str, JobKpis]] | None = None
                 ) -> None:
        self._build = build
        self._kpis = kpis
        self._collector = collector
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-refresh", daemon=True)

    def start(self) -> MetricsRefresher:
        self.refresh()
        self._thread.start()
        return self

    def refresh(self) -> None:
        try:
            snapshots = self._build()
            kpis = self._kpis(snapshots) if self._kpis is not None else None
            self._collector.update(snapshots, kpis=kpis)
        except Exception as exc:  # the store closing under us, a read failing: say so
            self._collector.update((), error=f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.refresh()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

