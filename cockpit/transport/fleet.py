"""`Fleet`: all the links of one cockpit, started, stopped and addressed by host name.

Each link runs its own thread and blocks in `select` with a timeout, so a fleet of
hundreds of hosts costs threads, not CPU. The fleet keeps the latest state of every
host so that the UI and the control layer can ask without touching the links.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cockpit.transport.deploy import ZipappBuilder
from cockpit.transport.inventory import HostSpec, Inventory
from cockpit.transport.link import BaseLink, LinkNotStreaming, LinkOptions
from cockpit.transport.local_link import LocalLink
from cockpit.transport.ssh_link import HostLink
from cockpit.transport.states import (
    FAILED_STATES,
    STOPPED,
    STREAMING,
    ChunkCallback,
    StateCallback,
    retrying_after,
    shown,
)

HighWaterFor = Callable[[str], int]


class UnknownHost(KeyError):
    """A control op named a host that is not in the fleet."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class HostStatus:
    name: str
    state: str
    detail: str
    spare: bool
    # The failure (state, reason) since the link last streamed: while it retries, its
    # state says "connecting" and this says why (`states.shown`).
    failure: tuple[str, str] | None = None

    @property
    def failed(self) -> bool:
        """Not delivering because something is wrong: failed, or retrying after a
        failure."""
        return self.state in FAILED_STATES or retrying_after(self.state, self.failure)

    def shown(self) -> tuple[str, str]:
        """The state and reason to tell the operator (`states.shown`)."""
        return shown(self.state, self.detail, self.failure)

    def reading(self) -> str:
        """`shown`, as "state (reason)"."""
        state, detail = self.shown()
        return state + (f" ({detail})" if detail else "")


class Fleet:
    """Owns one link per host and routes control ops to them."""

    def __init__(
        self,
        hosts: Inventory | Iterable[HostSpec],
        high_water: HighWaterFor,
        on_chunk: ChunkCallback,
        on_state: StateCallback | None = None,
        options: LinkOptions | None = None,
    ) -> None:
        specs = hosts.hosts if isinstance(hosts, Inventory) else tuple(hosts)
        names = [spec.name for spec in specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"host names must be unique; repeated: {', '.join(duplicates)}")
        self.options = options or LinkOptions()
        self.options.config()  # parse ~/.ssh/config once for all links
        self._listener = on_state
        self._lock = threading.Lock()
        self._status: dict[str, HostStatus] = {}
        self._high_water, self._on_chunk = high_water, on_chunk
        self._builder = ZipappBuilder()
        self._started = False
        self.links: dict[str, BaseLink] = {}
        for spec in specs:
            self._make_link(spec)

    def _make_link(self, spec: HostSpec) -> BaseLink:
        self._status[spec.name] = HostStatus(spec.name, STOPPED, "", spec.spare)
        hw = _bind(self._high_water, spec.name)
        if spec.is_local:
            link: BaseLink = LocalLink(spec, hw, self._on_chunk, self._on_state, self.options)
        else:
            link = HostLink(spec, hw, self._on_chunk, self._on_state, self.options,
                            self._builder)
        self.links[spec.name] = link
        return link

    def add(self, spec: HostSpec) -> bool:
        """Stream one more host (a batch scheduler's node, known once its allocation
        starts); started at once when the fleet runs. False when the name is taken."""
        with self._lock:
            if spec.name in self.links:
                return False
            link = self._make_link(spec)
            started = self._started
        if started:
            link.start()
        return True

    def _on_state(self, host: str, state: str, detail: str) -> None:
        with self._lock:
            spare = self._status[host].spare
            link = self.links.get(host)
            self._status[host] = HostStatus(host, state, detail, spare,
                                            link.failure if link is not None else None)
        if self._listener is not None:
            self._listener(host, state, detail)

    def start(self) -> None:
        with self._lock:
            self._started = True
            links = list(self.links.values())
        for link in links:
            link.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every link; they close in parallel so stopping 256 hosts stays quick."""
        with self._lock:
            self._started = False
            links = list(self.links.values())
        for link in links:
            link.request_stop()
        for link in links:
            link.stop(timeout)

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def link(self, host: str) -> BaseLink:
        try:
            return self.links[host]
        except KeyError:
            known = ", ".join(sorted(self.links)[:10])
            raise UnknownHost(f"no host named {host!r} in the fleet (hosts: {known}…)") from None

    def send(self, host: str, op: dict) -> None:
        """Send one control op to one host; raises `LinkNotStreaming` if it is not up."""
        self.link(host).send_control(op)

    def broadcast(self, op: dict, hosts: Iterable[str] | None = None) -> dict[str, str | None]:
        """Send to many hosts; per host None (sent) or the reason it was not sent."""
        results: dict[str, str | None] = {}
        for name in list(self.links) if hosts is None else hosts:
            try:
                self.send(name, op)
                results[name] = None
            except (LinkNotStreaming, UnknownHost) as exc:
                results[name] = str(exc)
        return results

    def status(self) -> dict[str, HostStatus]:
        with self._lock:
            return dict(self._status)

    def streaming(self) -> list[str]:
        return [name for name, s in self.status().items() if s.state == STREAMING]


def _bind(high_water: HighWaterFor, host: str) -> Callable[[], int]:
    return lambda: high_water(host)
