"""A `Source` that serves fixed data: for the demo, screenshots and edge-case tests.

It follows the `Source` protocol exactly (label, start, snapshot, details, stop,
controller), so the app cannot tell it from a live or replay source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from cockpit.read.details import DetailKind
from cockpit.read.source import Controller
from cockpit.snapshot import Snapshot


class StaticSource:
    def __init__(self, snapshot: Snapshot, details: Mapping[str, object] | None = None,
                 controller: Controller | None = None, label: str | None = None) -> None:
        self._snapshot = snapshot
        self._details = dict(details or {})
        self.controller = controller
        self.focus_job: str | None = None  # a fixed snapshot shows its one job
        self.label = label or snapshot.source_label
        self.snapshot_calls = 0
        self.details_calls: list[tuple[str, dict[str, object]]] = []
        self.started = threading.Event()
        self.stopped = threading.Event()
        self._on_data: Callable[[], None] | None = None

    def start(self, on_data: Callable[[], None]) -> None:
        self._on_data = on_data
        self.started.set()

    def notify(self) -> None:
        """Tell the app there is new data, as a live source does on each chunk."""
        if self._on_data is not None:
            self._on_data()

    def set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self.notify()

    def snapshot(self, buckets: int = 120) -> Snapshot:
        self.snapshot_calls += 1
        return self._snapshot

    def details(self, what: DetailKind, **kw: object) -> object:
        self.details_calls.append((what, dict(kw)))
        value = self._details.get(what)
        if callable(value):
            return value(**kw)
        return value

    def stop(self) -> None:
        self.stopped.set()
