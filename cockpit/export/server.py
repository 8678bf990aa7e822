"""The HTTP endpoint Prometheus scrapes: `cockpit watch … --metrics [ADDR:]PORT`.

It binds to loopback unless the operator names another address: the figures describe
a training job and its hosts, which is nobody else's business by default. The endpoint
is prometheus_client's own WSGI server (text exposition, and OpenMetrics when the
scraper asks for it), on a daemon thread, serving only the cockpit's collector.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from cockpit.analysis.kpis import JobKpis
from cockpit.errors import CockpitError
from cockpit.export.metrics import MetricsRefresher, SnapshotCollector, jobs_to_export
from cockpit.read.kpis_report import KPI_REFRESH_S, job_kpis_of
from cockpit.read.source import build_snapshot
from cockpit.snapshot import Snapshot
from cockpit.store.queries import StoreReader

DEFAULT_HOST = "127.0.0.1"
LABEL = "METRICS"


def parse_listen(text: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[V6]:PORT` -> (host, port); loopback when no host is given.
    Raises CockpitError naming what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise CockpitError(f"--metrics {text!r}: the port must be a number") from None
    if not 1 <= port <= 65535:
        raise CockpitError(f"--metrics {text!r}: the port must be 1-65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise CockpitError(f"--metrics {text!r}: {host!r} is not an IP address") from None
    return host, port


def job_snapshots(reader: Any, host_states: Mapping[str, str] | None) -> list[Snapshot]:
    """One snapshot per job exported (the job the panes show first, then the others
    `jobs_to_export` picks: at most `MAX_EXPORTED_JOBS` builds, however many job names
    the hosts sent), built as the panes build theirs."""
    now = time.time()
    first = build_snapshot(reader, until_ts=None, label=LABEL, host_states=host_states,
                           now=now)
    out = [first]
    for job in jobs_to_export(first):
        if job != first.job:
            out.append(build_snapshot(reader, until_ts=None, label=LABEL,
                                      host_states=host_states, now=now, job=job))
    return out


def store_snapshots(store: Any, host_states: Callable[[], Mapping[str, str]]
                    ) -> tuple[Callable[[], list[Snapshot]],
                               Callable[[Sequence[Snapshot]], dict[str, JobKpis]]]:
    """The refresher's build functions over a live store, sharing a reader of their own
    (used on the refresher's thread only): the snapshots, with the links' states at each
    refresh, and the jobs' KPIs."""
    reader = StoreReader(store)
    return (lambda: job_snapshots(reader, host_states()),
            lambda snaps: job_kpis(reader, snaps))


def job_kpis(reader: Any, snapshots: Sequence[Snapshot]) -> dict[str, JobKpis]:
    """The KPIs of each job exported (those with a snapshot), recomputed when the
    recording has moved `KPI_REFRESH_S` on (they sum the job's whole history: not at
    every refresh)."""
    jobs = dict.fromkeys(snap.job for snap in snapshots if snap.job is not None)
    newest = reader.frontier()
    out = {}
    for job in jobs:
        key = (job, None if newest is None else int(newest // KPI_REFRESH_S))
        out[job] = reader.memo(f"export_kpis:{job}", key,
                               lambda job=job: job_kpis_of(reader, job))
    return out


class MetricsServer:
    """The collector, its refresher and the HTTP server, started and stopped together."""

    def __init__(self, listen: tuple[str, int], build: Callable[[], Sequence[Snapshot]],
                 interval: float = 5.0,
                 kpis: Callable[[Sequence[Snapshot]], Mapping[str, JobKpis]] | None = None
                 ) -> None:
        self.host, self.port = listen
        self.collector = SnapshotCollector()
        self.refresher = MetricsRefresher(build, self.collector, interval, kpis)
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> MetricsServer:
        self.refresher.start()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self._server, self._thread = start_http_server(self.port, self.host, registry)
        except OSError as exc:
            self.refresher.stop()
            raise CockpitError(f"--metrics {self.host}:{self.port}: cannot listen: "
                               f"{exc.strerror or exc}") from None
        self.port = self._server.server_port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(10)
            self._server = None
        self.refresher.stop()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
