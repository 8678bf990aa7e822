"""Reads for comparing runs (`cockpit.read.compare`): a job's final and best train loss
and its speed, summed in DuckDB.

Two runs are compared by where they ended, the best they reached and how fast they
went; a long job has millions of step records, so the sums and extremes are taken
where the rows are and one row comes back. Only the job's reference rank (its lowest)
is read: every rank waits for the others each step, so one rank's times are the job's.
"""

from __future__ import annotations

from pathlib import Path

from cockpit.store.queries_base import ReaderBase, until_clause
from cockpit.store.queries_train import REDO_SQL, STEPS_SQL


class CompareQueries(ReaderBase):
    def recording_name(self) -> str:
        """The recording's file name, how a comparison names the side's recording."""
        path = getattr(self._store, "path", None)
        return Path(path).name if path is not None else "recording"

    def run_totals(self, job: str, *, until_ts: float | None = None) -> dict[str, object]:
        """Of the reference rank: the first and last record time and step; the steps,
        step time, samples and tokens of the records that reached a new step (a record
        that redid steps after a restart from an older checkpoint is not speed); the
        newest finite loss and its step; the lowest finite loss and its step."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rank, rank_sql, rank_args = self.reference_rank(cur, job, cond, args)
            row = cur.execute(
                "WITH r AS (SELECT step, ts, seq, step_time, samples, tokens, "
                "CASE WHEN isfinite(loss) THEN loss END AS loss, "
                f"{STEPS_SQL} AS n, {REDO_SQL} AS redo "
                f"FROM train WHERE job = ?{rank_sql}{cond}) "
                "SELECT count(*), min(ts), max(ts), min(step), max(step), "
                "coalesce(sum(n) FILTER (WHERE NOT redo), 0), "
                "count(*) FILTER (WHERE NOT redo), "
                "count(step_time) FILTER (WHERE NOT redo), "
                "sum(step_time) FILTER (WHERE NOT redo), "
                "sum(samples) FILTER (WHERE NOT redo), sum(tokens) FILTER (WHERE NOT redo), "
                "arg_max(loss, (ts, seq)) FILTER (WHERE loss IS NOT NULL), "
                "arg_max(step, (ts, seq)) FILTER (WHERE loss IS NOT NULL), "
                "min(loss), arg_min(step, loss) FROM r",
                [job, *rank_args, *args]).fetchone()
        (records, first_ts, last_ts, first_step, last_step, steps, new_records, timed,
         step_time, samples, tokens, final_loss, final_step, best_loss, best_step) = row
        return {
            "rank": rank, "records": int(records), "first_ts": first_ts, "last_ts": last_ts,
            "first_step": None if first_step is None else int(first_step),
            "last_step": None if last_step is None else int(last_step),
            "steps": int(steps), "new_records": int(new_records),
            "timed_records": int(timed),
            "step_time": None if step_time is None else float(step_time),
            "samples": None if samples is None else float(samples),
            "tokens": None if tokens is None else float(tokens),
            "final_loss": None if final_loss is None else float(final_loss),
            "final_loss_step": None if final_step is None else int(final_step),
            "best_loss": None if best_loss is None else float(best_loss),
            "best_loss_step": None if best_step is None else int(best_step),
        }
