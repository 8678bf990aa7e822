"""Which record tables a store's writes changed, as counters that only move forward.

A live screen refresh first asks DuckDB where every record table ends (its newest ts,
row count and row id: `queries_frontiers._probe_newest`), one aggregate part per
table. Most tables (runs, evaluations, logs, alerts, hellos) change a few times an
hour, while the part that asks each of them costs every refresh about as much as the
part for a table that grew. The writer knows which tables each commit added rows to:
it moves their counters after the commit, and moves every table's for any other
write to the record tables (retention, an earlier run filed under another name, a
checkpoint). A reader asks again only about the tables whose counter moved since its
last probe (`ReaderBase.frontiers`).

A counter moves only after its commit is visible, and a reader reads the counters
before its probe: a commit between the two is found by the probe and asked about once
more at the next refresh, never missed. Every `Store` open on the same file in this
process shares one set of counters (DuckDB lets no other process write a file this
one has open), so a write through any of them is seen by the readers of all.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Versions:
    """The counters at one instant: `every` moves with each write to all tables,
    `each` with each commit that added rows to one."""

    every: int = 0
    each: Mapping[str, int] = field(default_factory=dict)

    def moved(self, since: Versions, table: str) -> bool:
        """Whether `table` may have changed between `since` and this."""
        return self.every != since.every or self.each.get(table, 0) != since.each.get(table, 0)


class TableVersions:
    """The counters of one store file (`versions_for`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._every = 0
        self._each: dict[str, int] = {}

    def added_to(self, tables: Iterable[str]) -> None:
        """A commit added rows to `tables` (and changed no other record table)."""
        with self._lock:
            for table in tables:
                self._each[table] = self._each.get(table, 0) + 1

    def changed_all(self) -> None:
        """A write that may have changed any record table's rows or their ids."""
        with self._lock:
            self._every += 1

    def now(self) -> Versions:
        with self._lock:
            return Versions(self._every, dict(self._each))


_SHARED: weakref.WeakValueDictionary[str, TableVersions] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def versions_for(path: str | Path) -> TableVersions:
    """The counters of the store file at `path`, shared by every store open on it."""
    key = os.path.realpath(path)
    with _SHARED_LOCK:
        versions = _SHARED.get(key)
        if versions is None:
            versions = _SHARED[key] = TableVersions()
        return versions
