"""Reads for the KPIs (`cockpit.analysis.kpis`): a job's step totals, summed in DuckDB.

A month-long job has millions of step records: the KPIs need only their sums, split
by whether a record reached a new step or redid one (after a restart from an older
checkpoint), so the sums are taken where the rows are and one row comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from cockpit.store.queries_base import ReaderBase, until_clause
from cockpit.store.queries_train import REDO_SQL, STEPS_SQL


class StepTotalsRow(TypedDict):
    """`step_totals`: the reference rank and the fields of `cockpit.analysis.kpis.StepTotals`."""

    rank: int | None
    records: int
    first_ts: float | None
    last_ts: float | None
    last_step: int | None
    step_time: float
    data_time: float
    ckpt_time: float | None
    redo_records: int
    redo_steps: int
    redo_time: float


class KpiQueries(ReaderBase):
    def step_totals(self, job: str, *, until_ts: float | None = None) -> StepTotalsRow:
        """Sums over the job's reference rank (its lowest: every rank waits for the
        others each step, so one rank's wall times are the job's): step, data and
        checkpoint time of the records that reached a new step, and the records, steps
        and step time of those that redid steps already reached (a record whose step is
        at or below the highest one before it in time)."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rank, rank_sql, rank_args = self.reference_rank(cur, job, cond, args)
            row = cur.execute(
                "WITH r AS (SELECT step, ts, step_time, data_time, ckpt_time, "
                f"{STEPS_SQL} AS n, {REDO_SQL} AS redo "
                f"FROM train WHERE job = ?{rank_sql}{cond}) "
                "SELECT count(*), min(ts), max(ts), max(step), "
                "coalesce(sum(step_time) FILTER (WHERE NOT redo), 0), "
                "coalesce(sum(data_time) FILTER (WHERE NOT redo), 0), "
                "sum(ckpt_time) FILTER (WHERE NOT redo), count(ckpt_time), "
                "count(*) FILTER (WHERE redo), coalesce(sum(n) FILTER (WHERE redo), 0), "
                "coalesce(sum(step_time) FILTER (WHERE redo), 0) FROM r",
                [job, *rank_args, *args]).fetchone()
        (records, first, last, last_step, step_time, data_time, ckpt, ckpt_n, redo,
         redo_steps, redo_time) = row
        return {
            "rank": rank, "records": int(records), "first_ts": first, "last_ts": last,
            "last_step": None if last_step is None else int(last_step),
            "step_time": float(step_time), "data_time": float(data_time),
            "ckpt_time": float(ckpt or 0.0) if ckpt_n else None,
            "redo_records": int(redo), "redo_steps": int(redo_steps),
            "redo_time": float(redo_time),
        }

    def first_steps_after(self, job: str, times: Sequence[float], *,
                          until_ts: float | None = None) -> dict[float, float | None]:
        """ts -> when the job's first step record after it began (its ts less its step
        time, not before ts; None: no step since): how long each start of its
        processes took to reach training. A first step's time may hold some of the
        start-up (the Reporter's clock starts before the first step): counted as step
        time, not twice."""
        cond, args = until_clause(until_ts)
        out: dict[float, float | None] = {}
        with self._cur() as cur:
            for t in sorted(set(times)):
                row = cur.execute(
                    f"SELECT ts, step_time FROM train WHERE job = ? AND ts > ?{cond} "
                    "ORDER BY ts, seq LIMIT 1", [job, t, *args]).fetchone()
                if row is None:
                    out[t] = None
                else:
                    ts, step_time = float(row[0]), row[1]
                    out[t] = max(t, ts - float(step_time)) if isinstance(
                        step_time, int | float) and step_time > 0 else ts
        return out

    def job_hosts(self, job: str, *, until_ts: float | None = None) -> list[str]:
        """The hosts that ran any part of `job`: those of its steps, runs and events."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = cur.execute(
                f"SELECT DISTINCT host FROM (SELECT host FROM train WHERE job = ?{cond} "
                f"UNION ALL SELECT host FROM run WHERE job = ?{cond} "
                f"UNION ALL SELECT host FROM event WHERE job = ?{cond}) ORDER BY host",
                [job, *args, job, *args, job, *args]).fetchall()
        return [str(r[0]) for r in rows]
