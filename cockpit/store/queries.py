"""The store's read API: plain Python data out, bounded cost per call.

`StoreReader(store)` is what `cockpit.read.source.build_snapshot`, the drill-down details,
replay and the headless report read through; nothing else outside `cockpit.store`
talks SQL. Every method takes `until_ts` (the replay cursor; None = everything).
"""

from __future__ import annotations

from cockpit.store.queries_base import RECORD_TABLES, StoreLike
from cockpit.store.queries_compare import CompareQueries
from cockpit.store.queries_events import EventQueries
from cockpit.store.queries_frontiers import Frontiers
from cockpit.store.queries_health import HealthQueries
from cockpit.store.queries_kpis import KpiQueries
from cockpit.store.queries_train import TrainQueries

__all__ = ["Frontiers", "StoreReader"]


class StoreReader(TrainQueries, HealthQueries, EventQueries, KpiQueries, CompareQueries):
    def __init__(self, store: StoreLike) -> None:
        super().__init__(store)

    def time_range(self) -> tuple[float, float] | None:
        """(first, last) record ts over the whole recording (from column statistics)."""
        parts = " UNION ALL ".join(
            f'SELECT min(ts) AS lo, max(ts) AS hi FROM "{t}"' for t in RECORD_TABLES
        )
        with self._cur() as cur:
            row = cur.execute(f"SELECT min(lo), max(hi) FROM ({parts})").fetchone()
        if not row or row[0] is None:
            return None
        return float(row[0]), float(row[1])

    def frontier(self, *, until_ts: float | None = None) -> float | None:
        """The newest record's ts at or before `until_ts`."""
        return self.frontiers(until_ts=until_ts).newest
