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

from cockpit.errors import CockpitError
from cockpit.export.metrics import MetricsRefresher, SnapshotCollector
from cockpit.snapshot import Snapshot
from cockpit.source import build_snapshot
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
    """One snapshot per job of the store (the newest-training one first), built as the
    panes build theirs."""
    now = time.time()
    first = build_snapshot(reader, until_ts=None, label=LABEL, host_states=host_states,
                           now=now)
    out = [first]
    for job in first.jobs:
        if job != first.job:
            out.append(build_snapshot(reader, until_ts=None, label=LABEL,
                                      host_states=host_states, now=now, job=job))
    return out


def store_snapshots(store: Any, host_states: Callable[[], Mapping[str, str]]
                    ) -> Callable[[], list[Snapshot]]:
    """The refresher's build function over a live store: a reader of its own (used on
    the refresher's thread only) and the links' states at each refresh."""
    reader = StoreReader(store)
    return lambda: job_snapshots(reader, host_states())


class MetricsServer:
    """The collector, its refresher and the HTTP server, started and stopped together."""

    def __init__(self, listen: tuple[str, int], build: Callable[[], Sequence[Snapshot]],
                 interval: float = 5.0) -> None:
        self.host, self.port = listen
        self.collector = SnapshotCollector()
        self.refresher = MetricsRefresher(build, self.collector, interval)
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
