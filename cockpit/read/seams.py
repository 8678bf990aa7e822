"""The seams between the read model and what shows it: `Source`, what every session
(live, replay, a fixed snapshot) offers the UI and the exporters, and `Controller`, the
operations on one job the screen may offer, as `cockpit.control.controller.Controller`
(which this layer sits below) provides them. Declared here, below `cockpit.read.source`,
so that a session names what it implements without importing how a snapshot is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from cockpit.read.details import DetailKind
from cockpit.snapshot import Snapshot

# Points per chart series. The loss analysis (spikes, divergence, LR) reads the same
# series, so the screen and the report must ask for the same number to agree.
SNAPSHOT_BUCKETS = 120


class ScalableSpec(Protocol):
    """What the screen reads of a job's spec before offering to scale it."""

    @property
    def elastic(self) -> bool: ...


class Controller(Protocol):
    """The operations on one job that the screen offers, as `cockpit.control.controller.
    Controller` (which this layer sits below) provides them. Each sends to the job's
    agents and returns what it sent, for the operator to read; the agents' answers come
    back as acks (`last_ops`: host -> id of the op most recently sent there)."""

    @property
    def job(self) -> str: ...

    @property
    def hosts(self) -> tuple[str, ...]: ...

    @property
    def spares(self) -> tuple[str, ...]: ...

    @property
    def spec(self) -> ScalableSpec: ...

    @property
    def last_ops(self) -> dict[str, str]: ...

    def refresh(self) -> None: ...  # adopt the job file as it is now

    def controller_for(self, job: str | None) -> Controller | None: ...  # a fork's

    def describe(self, action: str, add: str | None = None, remove: str | None = None
                 ) -> str: ...

    def check_scale(self, add: str | None, remove: str | None) -> None: ...

    def pause(self) -> object: ...

    def resume(self) -> object: ...

    def relaunch(self, exclude: tuple[str, ...] = ()) -> object: ...

    def fork(self, overrides: dict[str, Any]) -> object: ...

    def adjust(self, **knobs: Any) -> object: ...

    def checkpoint_now(self) -> object: ...

    def eval_now(self) -> object: ...

    def scale(self, add: str | None = None, remove: str | None = None) -> object: ...

    def stop(self) -> object: ...


class Source(Protocol):
    @property
    def label(self) -> str: ...  # "LIVE" or "REPLAY 10x"

    @property
    def controller(self) -> Controller | None: ...  # None: "no controllable job attached"

    # The operator's pick among jobs training side by side (None: the newest started);
    # a source that cannot choose (a fixed snapshot) ignores it.
    focus_job: str | None

    def start(self, on_data: Callable[[], None]) -> None: ...

    # Blocking: called off the UI thread.
    def snapshot(self, buckets: int = SNAPSHOT_BUCKETS) -> Snapshot: ...

    def stop(self) -> None: ...

    # `Details` from a store; a fixed source may answer with plain data of that shape.
    def details(self, what: DetailKind, **kw: Any) -> object: ...
