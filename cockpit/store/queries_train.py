"""Reads about the training itself: jobs, run metadata, steps, evals, series.

Over 500 lines because every read of the train, run and eval tables is kept in this one
reader mixin: they share the step-window, world and until clauses, and what a record
covers (`STEPS_SQL`) is said once, here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

from agent.wire.events import FORK, JOB_STARTED
from cockpit.snapshot import Series
from cockpit.store.downsample import (
    Downsampled,
    bucket_rows,
    downsample_rows,
    extend_downsampled,
    results,
)
from cockpit.store.queries_base import WINDOWS, ReaderBase, Row, until_clause
from cockpit.store.queries_frontiers import Frontiers
from cockpit.store.schema import kind_is

RUN_FIELDS = (
    "total_steps", "total_epochs", "total_samples", "total_tokens", "stages", "config",
    "seed", "data_version", "git_commit", "flops_per_step", "peak_flops", "world_size",
    "tags",
)
# Fields a job keeps for its whole life: a later `run` record (a restart) that declares
# another value means the job now trains other code, data or randomness.
RUN_IDENTITY = ("git_commit", "data_version", "seed")
STEP_COLUMNS = (
    "host, seq, ts, rank, step, epoch, stage, loss, nonfinite, lr, samples, tokens, "
    "step_time, data_time, compute_time, comm_time, ckpt_time, loss_scale, grad_norm"
)
# How many optimizer steps one record covers. A trainer that logs every N steps (the
# Transformers adapter writes one record per `logging_steps`) says so in `extra.steps`,
# and its record's step_time, phase times, samples and tokens are then those N steps'
# sums. Anything else there (absent, not a whole number, out of range: the field comes
# from the trainer) counts as one step, what a record without it means.
MAX_STEPS_PER_RECORD = 1_000_000
_STEPS_VALUE = "TRY_CAST(extra->>'$.steps' AS DOUBLE)"
STEPS_SQL = (
    "CASE WHEN json_type(extra, '$.steps') IN ('UBIGINT', 'BIGINT', 'DOUBLE') AND "
    f"{_STEPS_VALUE} BETWEEN 1 AND {MAX_STEPS_PER_RECORD} AND {_STEPS_VALUE} = "
    f"floor({_STEPS_VALUE}) THEN CAST({_STEPS_VALUE} AS BIGINT) ELSE 1 END"
)
# Whether a record redid steps already reached: its step is at or below the highest one
# before it in time (a restart from an older checkpoint). Such records are not speed.
REDO_SQL = (
    "coalesce(step <= max(step) OVER (ORDER BY ts, seq ROWS BETWEEN UNBOUNDED PRECEDING "
    "AND 1 PRECEDING), false)"
)
# What the efficiency, ETA and stall rules read of recent steps, in the order of
# `cockpit.analysis.ranks.StepSample`'s fields (a rank that reported none is -1).
SAMPLE_COLUMNS = (
    "coalesce(rank, -1), host, step, step_time, data_time, compute_time, comm_time, "
    f"samples, tokens, ts, {STEPS_SQL}"
)
NONFINITE_LIMIT = 1000
LR_AROUND_STEPS = 100_000  # how far from an LR change its neighbouring records are looked for
STEP_AT_SECONDS = 3600.0  # how long before an instant its step is looked for (`steps_at`)
# Seconds before the newest step record that `latest_train` looks at, widening in turn.
LATEST_STEP_WINDOWS: tuple[float | None, ...] = (30.0, *WINDOWS)


@dataclass(frozen=True)
class NonFinite:
    steps: tuple[int, ...] = ()  # the first NONFINITE_LIMIT, in step order
    count: int = 0
    last: int | None = None
    since: float | None = None  # when the first of them was recorded

    def extended(self, new_steps: set[int], first_ts: float | None = None
                 ) -> NonFinite | None:  # fmt: skip
        """With the steps of rows added since, or None when that cannot be exact: a
        repeated step (a relaunch) at or below the newest is new only if it was not
        NaN before, which the first `steps` alone cannot tell once the limit is hit."""
        if not new_steps:
            return self
        last = -1 if self.last is None else self.last
        later = {s for s in new_steps if s > last}
        earlier = new_steps - later
        complete = self.count == len(self.steps)  # every NaN step is in `steps`
        if earlier and not complete:
            return None
        known = set(self.steps)
        fresh = later | (earlier - known)
        merged = tuple(sorted(known | fresh)[:NONFINITE_LIMIT])
        since = self.since if self.since is not None else first_ts
        return NonFinite(merged, self.count + len(fresh), max(self.last or -1, *new_steps),
                         since)


def world_clause(world: int | None, since: float | None) -> tuple[str, list[Any]]:
    """The step records of the job's current world of `world` ranks, held since `since`
    (`run_info`'s `world_since`).

    torchrun numbers a world's ranks from 0, so when a scale-down shrinks it the ranks
    numbered `world` or more are gone, yet their steps stay in the store. A rank's step
    counts for the current world when the rank is numbered below `world` or the step was
    taken since the world changed: a rank past a declared world that still trains (a
    trainer that declared a smaller world than it runs) is still shown.
    """
    if world is None or since is None:
        return "", []
    return " AND (rank IS NULL OR rank < ? OR ts >= ?)", [world, since]


def of_world(rank: Any, ts: float, world: int | None, since: float | None) -> bool:
    """`world_clause` for one record already read."""
    return (world is None or since is None or rank is None or rank < world
            or ts >= since)


class TrainQueries(ReaderBase):
    def jobs(self, *, until_ts: float | None = None) -> list[str]:
        """Every job the recording knows of, in order of first appearance.

        Jobs are declared by `run` records and lifecycle events (small tables); the
        newest training record's job is added in case a trainer never declared itself.
        """
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = self.fetch(
                cur,
                "SELECT job, min(ts) AS first FROM ("
                f" SELECT job, ts FROM run WHERE job IS NOT NULL{cond}"
                f" UNION ALL SELECT job, ts FROM event WHERE job IS NOT NULL{cond}"
                f" UNION ALL SELECT job, ts FROM eval WHERE job IS NOT NULL{cond}"
                ") GROUP BY job ORDER BY first, job",
                [*args, *args, *args],
            )
            names = [r["job"] for r in rows]
            newest = self._newest_train_job(cur, until_ts)
        if newest is not None and newest not in names:
            names.append(newest)
        return names

    def _newest_train_job(self, cur: Any, until_ts: float | None,
                          frontiers: Frontiers | None = None) -> str | None:
        rows = self.recent(cur, "train", until_ts=until_ts, columns="job", limit=1,
                           frontiers=frontiers)
        return rows[0]["job"] if rows else None

    def jobs_training(self, window: float, *, until_ts: float | None = None,
                      frontiers: Frontiers | None = None) -> dict[str, float]:
        """job -> its newest step's ts, for the jobs with a step in the `window` seconds
        before the newest training record (a job and its forks, side by side)."""
        with self._cur() as cur:
            end = (frontiers.ts.get("train") if frontiers is not None
                   else self.table_frontier(cur, "train", until_ts))
            if end is None:
                return {}
            rows = cur.execute(
                "SELECT job, max(ts) FROM train WHERE ts <= ? AND ts > ? AND job IS NOT NULL "
                "GROUP BY job", [end, end - window]).fetchall()
        return {str(job): float(ts) for job, ts in rows}

    def job_started_ts(self, job: str, *, until_ts: float | None = None) -> float | None:
        """When `job` first declared itself (its first `run` record or start event)."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            found = self.scalar(
                cur,
                f"SELECT min(ts) FROM (SELECT ts FROM run WHERE job = ?{cond} UNION ALL "
                f"SELECT ts FROM event WHERE job = ? AND {kind_is(JOB_STARTED)}{cond})",
                [job, *args, job, *args])
        return None if found is None else float(found)

    def forked_from(self, job: str, *, until_ts: float | None = None) -> dict[str, Any] | None:
        """The parent job and step a fork started from, as the agent's `fork` event says:
        a fork's curve starts at that step, and without it reads as a job that restarted
        from a checkpoint of its own."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = self.fetch(
                cur, f"SELECT data FROM event WHERE job = ? AND {kind_is(FORK)}{cond} "
                "ORDER BY ts DESC, seq DESC", [job, *args])
        for row in rows:
            data = row["data"] if isinstance(row["data"], dict) else {}
            if data.get("ok") is not False and isinstance(data.get("parent"), str):
                step = data.get("parent_step")
                return {"job": data["parent"],
                        "step": step if isinstance(step, int) and not isinstance(step, bool)
                        else None}
        return None

    def declared_job(self, *, until_ts: float | None = None) -> str | None:
        """The job most recently declared by a `run` record or lifecycle event."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            return self.scalar(
                cur,
                "SELECT job FROM (SELECT job, ts, seq FROM run WHERE job IS NOT NULL"
                f"{cond} UNION ALL SELECT job, ts, seq FROM event WHERE job IS NOT NULL"
                f"{cond}) ORDER BY ts DESC, seq DESC LIMIT 1",
                [*args, *args],
            )

    def current_job(self, *, until_ts: float | None = None,
                    frontiers: Frontiers | None = None) -> str | None:
        """The job that trained most recently, else the most recently declared one."""
        with self._cur() as cur:
            newest = self._newest_train_job(cur, until_ts, frontiers)
        return newest if newest is not None else self.declared_job(until_ts=until_ts)

    def run_info(self, job: str, *, until_ts: float | None = None) -> dict[str, Any]:
        """The job's `run` records merged in order (a later non-null field wins), plus
        when it started and the environment fingerprint of every host."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            runs = self.fetch(
                cur, f"SELECT * FROM run WHERE job = ?{cond} ORDER BY ts, seq", [job, *args]
            )
            hellos = self.fetch(
                cur,
                f"SELECT host, env, python, driver, agent_version FROM hello WHERE true{cond}"
                " QUALIFY row_number() OVER (PARTITION BY host ORDER BY ts DESC, seq DESC) = 1"
                " ORDER BY host",
                args,
            )
        info: dict[str, Any] = {"job": job, **{name: None for name in RUN_FIELDS}}
        changes: list[dict[str, Any]] = []
        declared: dict[tuple[Any, str], Any] = {}  # by rank: ranks may seed differently
        world_since = None
        world_before = None
        for record in runs:
            for name in RUN_FIELDS:
                value = record.get(name)
                if value is None:
                    continue
                if name == "world_size" and value != info[name]:
                    world_since = record["ts"]
                    world_before = info[name]
                info[name] = value
                if name not in RUN_IDENTITY:
                    continue
                before = declared.get((record.get("rank"), name))
                if before is not None and before != value:
                    changes.append({"field": name, "old": before, "new": value,
                                    "ts": record["ts"], "host": record.get("host")})
                declared[(record.get("rank"), name)] = value
        info["changes"] = changes
        # Since when the job has had its current world: the ranks numbered past a world
        # that shrank and silent since then are gone (`world_clause`).
        info["world_since"] = world_since
        info["world_before"] = world_before  # the world it had until then (None: first)
        info["started"] = self.job_started_ts(job, until_ts=until_ts)
        info["forked_from"] = self.forked_from(job, until_ts=until_ts)
        info["declared"] = bool(runs)
        info["env"] = {
            h["host"]: {
                "python": h["python"], "driver": h["driver"], "agent": h["agent_version"],
                **(h["env"] if isinstance(h["env"], dict) else {}),
            }
            for h in hellos
        }
        return info

    def latest_train(
        self, job: str, *, until_ts: float | None = None, expected_ranks: int | None = None,
        world_since: float | None = None, frontiers: Frontiers | None = None,
    ) -> list[Row]:
        """Per rank of the job's current world, its newest step record (newest by time,
        so a rollback shows), with `steps`: how many optimizer steps it covers
        (`STEPS_SQL`).

        Probed in widening windows before the newest train record until `expected_ranks`
        ranks are found; `arg_max` per rank costs half the window function it replaces.
        With `world_since`, the ranks a scale-down took away are left out
        (`world_clause`): else they would fill the count in place of a current rank that
        lags, and be named as lagging themselves for as long as their steps are kept.
        """
        want = expected_ranks or 1
        world, world_args = world_clause(expected_ranks, world_since)
        with self._cur() as cur:
            end = (frontiers.ts.get("train") if frontiers is not None
                   else self.table_frontier(cur, "train", until_ts))
            if end is None:
                return []
            rows: list[Row] = []
            for window in LATEST_STEP_WINDOWS:
                sql = (f"SELECT arg_max(struct_pack({STEP_COLUMNS}, steps := {STEPS_SQL}), "
                       "(ts, seq)) FROM train "
                       f"WHERE job = ? AND ts <= ?{world}")
                args: list[Any] = [job, end, *world_args]
                if window is not None:
                    sql += " AND ts > ?"
                    args.append(end - window)
                found = cur.execute(sql + " GROUP BY rank", args).fetchall()
                rows = sorted((r[0] for r in found),
                              key=lambda r: (r["rank"] is None, r["rank"]))
                if len(rows) >= want:
                    break
            return rows

    def recent_steps(
        self, job: str, n: int = 50, *, until_ts: float | None = None,
        last_step: int | None = None, columns: str = STEP_COLUMNS,
    ) -> list[Row]:
        """Per rank, the last `n` steps up to the newest, oldest first.

        Bounded by a step range (zone maps prune the rest); a step run twice because of
        a rollback is taken from its newest run. That choice is made here rather than
        with a window function, which costs several times the read itself; `columns`
        must therefore include rank, step, ts and seq.
        """
        if last_step is None:
            latest = self.latest_train(job, until_ts=until_ts)
            if not latest:
                return []
            newest = max(latest, key=lambda r: (r["ts"], r["seq"]))
            last_step = int(newest["step"])
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = self.fetch(
                cur,
                f"SELECT {columns} FROM train WHERE job = ? AND step > ? AND step <= ?"
                f"{cond} ORDER BY step, rank, ts, seq",
                [job, last_step - n, last_step, *args],
            )
        # Sorted by (step, rank, ts, seq): the newest run of a (rank, step) comes last.
        return [r for r, after in zip(rows, [*rows[1:], None], strict=True)
                if after is None or (after["step"], after["rank"]) != (r["step"], r["rank"])]

    def recent_step_samples(
        self, job: str, n: int, *, until_ts: float | None, last_step: int,
        bounded: bool = True, world: int | None = None, world_since: float | None = None,
    ) -> list[tuple[Any, ...]]:
        """`recent_steps` as plain tuples of `SAMPLE_COLUMNS`: a refresh reads a few
        thousand of them, and the analysis rules need no dict per row. With `bounded`
        false, steps past `last_step` (a rank ahead of the newest record, or the steps
        a rolled-back job has yet to redo) are included too. With `world` and
        `world_since`, the steps of ranks a scale-down took away are not: a job that
        goes on from an earlier checkpoint repeats their steps, and they would count in
        its throughput as if those ranks still trained (`world_clause`)."""
        cond, args = until_clause(until_ts)
        upper = " AND step <= ?" if bounded else ""
        of_world, world_args = world_clause(world, world_since)
        with self._cur() as cur:
            rows = cur.execute(
                f"SELECT {SAMPLE_COLUMNS} FROM train WHERE job = ? AND step > ?{upper}"
                f"{cond}{of_world} ORDER BY step, rank, ts, seq",
                [job, last_step - n, *([last_step] if bounded else []), *args, *world_args],
            ).fetchall()
        return newest_per_rank_step(rows)

    def first_other_rank_ts(self, job: str) -> float | None:
        """The oldest kept step record of a rank other than 0 (NaN/Inf steps aside).

        Retention drops other ranks' steps past the raw window, so a replay before this
        instant sees rank 0's steps alone (`cockpit.store.retention`).

        The first row by time, not `min(ts)`: DuckDB's top-1 pushes its bound into the
        scan, which then skips every row group whose zone map starts later (one row
        group of a day-long recording instead of all of them; the replay's first screen
        asks this).
        """
        with self._cur() as cur:
            row = cur.execute(
                "SELECT ts FROM train WHERE job = ? AND rank <> 0 AND nonfinite IS NULL "
                "ORDER BY ts LIMIT 1",
                [job],
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def newest_train_row(self, *, until_ts: float | None = None,
                         frontiers: Frontiers | None = None) -> Row | None:
        """(job, ts, seq) of the newest training record."""
        with self._cur() as cur:
            rows = self.recent(cur, "train", until_ts=until_ts, columns="job, ts, seq",
                               limit=1, frontiers=frontiers)
        return rows[0] if rows else None

    def series(
        self,
        table: str,
        column: str,
        *,
        where: dict[str, Any],
        x: str = "step",
        buckets: int = 120,
        until_ts: float | None = None,
        x_range: tuple[float, float] | None = None,
    ) -> Series:
        """A downsampled series (one point per bucket), computed in SQL."""
        (found,) = self.series_columns(table, (column,), where=where, x=x, buckets=buckets,
                                       until_ts=until_ts, x_range=x_range)
        return found

    def series_columns(
        self,
        table: str,
        columns: tuple[str, ...],
        *,
        where: dict[str, Any],
        x: str = "step",
        buckets: int = 120,
        until_ts: float | None = None,
        x_range: tuple[float, float] | None = None,
    ) -> list[Series]:
        """`series` of several columns under one filter, in order, sharing one x range
        and one statement (a refresh draws four series of the reference rank)."""
        with self._cur() as cur:
            found = downsample_rows(cur, table, columns, x=x, buckets=buckets, where=where,
                                    until_ts=until_ts, x_range=x_range)
        return _to_series(found, len(columns))

    def series_columns_held(
        self,
        name: str,
        table: str,
        columns: tuple[str, ...],
        *,
        where: dict[str, Any],
        x: str,
        buckets: int,
        until_ts: float | None,
        frontiers: Frontiers,
    ) -> list[Series]:
        """`series_columns`, remembered under `name` and, when `table` grew by rows
        that only extend the series, brought up to date from those rows alone
        (`extend_downsampled`) rather than read in full: a refresh after each training
        step then folds in the few rows it added (read once for every answer kept
        about the table, `added_rows`) instead of running the level read."""
        def read() -> Downsampled:
            with self._cur() as cur:
                return downsample_rows(cur, table, columns, x=x, buckets=buckets,
                                       where=where, until_ts=until_ts)

        def reread(lo: float, hi: float) -> list[dict[str, Any]]:
            # Live, up to the frontier probed, as the added rows are read.
            with self._cur() as cur:
                return bucket_rows(cur, table, columns, x=x, where=where, lo=lo, hi=hi,
                                   until_ts=until_ts if until_ts is not None
                                   else frontiers.ts.get(table))

        def extend(held: Downsampled, after: float) -> Downsampled | None:
            added = self.added_rows(table, after, until_ts, frontiers)
            if added is None:
                return None
            return extend_downsampled(held, added, columns, x=x, buckets=buckets,
                                      where=where, until_ts=until_ts, reread=reread)

        params = (columns, tuple(sorted(where.items())), x, buckets)
        found = self.kept(name, params, table, frontiers, read, extend)
        return _to_series(found, len(columns))

    def eval_losses(self, job: str, *, until_ts: float | None = None
                    ) -> dict[int, tuple[float, int, float | None]]:
        """step -> (ts, seq, loss) of each evaluation of `job`, the newest if a step
        repeats: what the loss chart and the divergence rule read of evaluations (a
        long job holds thousands, so nothing else is read or decoded)."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = cur.execute(
                f"SELECT step, ts, seq, loss FROM eval WHERE job = ? AND step IS NOT NULL{cond}"
                " QUALIFY row_number() OVER (PARTITION BY step ORDER BY ts DESC, seq DESC) = 1",
                [job, *args],
            ).fetchall()
        return {int(step): (ts, seq, loss) for step, ts, seq, loss in rows}

    def nonfinite_steps(
        self, job: str, *, until_ts: float | None = None, limit: int = NONFINITE_LIMIT,
    ) -> list[int]:
        """Steps whose loss was NaN/Inf on any rank (the column is almost always null,
        so row groups without a value are skipped from their statistics)."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = self.fetch(
                cur,
                "SELECT DISTINCT step FROM train WHERE job = ? AND nonfinite IS NOT NULL"
                f"{cond} ORDER BY step LIMIT {int(limit)}",
                [job, *args],
            )
        return [int(r["step"]) for r in rows if r["step"] is not None]

    def nonfinite_summary(self, job: str, *, until_ts: float | None = None,
                          limit: int = NONFINITE_LIMIT) -> NonFinite:
        """The NaN/Inf steps of `job`: the first `limit` (to mark), how many in all and
        the newest (a run that stays NaN for days must not read "1000, last 10,852")."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            count, last, since = cur.execute(
                "SELECT count(DISTINCT step), max(step), min(ts) FROM train WHERE job = ? "
                f"AND nonfinite IS NOT NULL AND step IS NOT NULL{cond}", [job, *args]
            ).fetchone() or (0, None, None)
        steps = tuple(self.nonfinite_steps(job, until_ts=until_ts, limit=limit)) if count else ()
        return NonFinite(steps, int(count or 0), None if last is None else int(last),
                         None if since is None else float(since))

    def peak_step(
        self, job: str, rank: int | None, column: str, first: float, last: float, *,
        until_ts: float | None = None,
    ) -> int | None:
        """The step in [first, last] where `column` peaked: pins a spike found on a
        downsampled series to its exact step (a step-range read, zone-map bounded)."""
        return self.peak_steps(job, rank, column, [(first, last)], until_ts=until_ts)[0]

    def peak_steps(
        self, job: str, rank: int | None, column: str,
        ranges: list[tuple[float, float]], *, until_ts: float | None = None,
    ) -> list[int | None]:
        """`peak_step` for several step ranges in one statement (one part per range)."""
        if column not in ("loss", "grad_norm", "step_time"):
            raise ValueError(f"peak_step reads loss, grad_norm or step_time, not {column!r}")
        if not ranges:
            return []
        cond, args = until_clause(until_ts)
        rank_sql, rank_args = (" AND rank = ?", [rank]) if rank is not None else ("", [])
        parts = []
        params: list[Any] = []
        for i, (first, last) in enumerate(ranges):
            parts.append(
                f"(SELECT {i} AS i, step FROM train WHERE job = ? AND step >= ? AND step <= ?"
                f"{rank_sql}{cond} AND {column} IS NOT NULL ORDER BY {column} DESC, step "
                "LIMIT 1)"
            )
            params += [job, first, last, *rank_args, *args]
        with self._cur() as cur:
            found = dict(cur.execute(" UNION ALL ".join(parts), params).fetchall())
        return [int(found[i]) if found.get(i) is not None else None
                for i in range(len(ranges))]

    def lr_around(
        self, job: str, rank: int | None, steps: list[int], *, until_ts: float | None = None,
    ) -> dict[int, tuple[float | None, float | None, float | None]]:
        """For each step of an LR change, (the LR of `rank`'s newest record at or before
        it, the LR of its first record after it, that record's ts), in one statement;
        None where no record lies within `LR_AROUND_STEPS` (a step range each side:
        zone maps keep it to a few row groups however long the run). A step recorded
        twice (a rollback) is read from its newest run."""
        if not steps:
            return {}
        cond, args = until_clause(until_ts)
        rank_sql, rank_args = (" AND rank = ?", [rank]) if rank is not None else ("", [])
        parts = []
        params: list[Any] = []
        for i, step in enumerate(steps):
            parts.append(
                f"(SELECT {i} AS i, 0 AS after, lr, ts FROM train WHERE job = ? AND step <= ? "
                f"AND step > ?{rank_sql}{cond} AND lr IS NOT NULL ORDER BY step DESC, ts DESC "
                "LIMIT 1)")
            params += [job, step, step - LR_AROUND_STEPS, *rank_args, *args]
            parts.append(
                f"(SELECT {i} AS i, 1 AS after, lr, ts FROM train WHERE job = ? AND step > ? "
                f"AND step <= ?{rank_sql}{cond} AND lr IS NOT NULL ORDER BY step, ts DESC "
                "LIMIT 1)")
            params += [job, step, step + LR_AROUND_STEPS, *rank_args, *args]
        with self._cur() as cur:
            found = {(i, after): (lr, ts) for i, after, lr, ts
                     in cur.execute(" UNION ALL ".join(parts), params).fetchall()}
        out: dict[int, tuple[float | None, float | None, float | None]] = {}
        for i, step in enumerate(steps):
            before = found.get((i, 0), (None, None))[0]
            after, after_ts = found.get((i, 1), (None, None))
            out[step] = (before, after, after_ts)
        return out

    def steps_at(
        self, job: str, rank: int | None, stamps: list[float], *,
        until_ts: float | None = None,
    ) -> dict[float, int | None]:
        """For each instant, the step of `rank`'s newest record at or before it, in one
        statement: where on a step axis something seen only by its time (an XID, a
        host lost) belongs. None where no record lies within `STEP_AT_SECONDS` before
        it (the job was not training then); the bound keeps each lookup to the few row
        groups around it, however long the run."""
        if not stamps:
            return {}
        cond, args = until_clause(until_ts)
        rank_sql, rank_args = (" AND rank = ?", [rank]) if rank is not None else ("", [])
        parts = []
        params: list[Any] = []
        for i, ts in enumerate(stamps):
            parts.append(
                f"(SELECT {i} AS i, step FROM train WHERE job = ? AND ts <= ? AND ts > ?"
                f"{rank_sql}{cond} AND step IS NOT NULL ORDER BY ts DESC, seq DESC LIMIT 1)")
            params += [job, ts, ts - STEP_AT_SECONDS, *rank_args, *args]
        with self._cur() as cur:
            found = dict(cur.execute(" UNION ALL ".join(parts), params).fetchall())
        return {ts: (int(found[i]) if found.get(i) is not None else None)
                for i, ts in enumerate(stamps)}

    def first_step_ts_after(self, job: str, stamps: list[float], *,
                          until_ts: float | None = None) -> dict[float, float | None]:
        """For each instant (a start of the job's processes), the ts of the job's first
        step record at or after it, within `STEP_AT_SECONDS`: where its start-up ended.
        None where no step followed within that time."""
        if not stamps:
            return {}
        cond, args = until_clause(until_ts)
        parts = []
        params: list[Any] = []
        for i, ts in enumerate(stamps):
            parts.append(f"(SELECT {i} AS i, min(ts) FROM train WHERE job = ? AND ts >= ? "
                         f"AND ts < ?{cond})")
            params += [job, ts, ts + STEP_AT_SECONDS, *args]
        with self._cur() as cur:
            found = dict(cur.execute(" UNION ALL ".join(parts), params).fetchall())
        return {ts: (float(found[i]) if found.get(i) is not None else None)
                for i, ts in enumerate(stamps)}

    def stepped_after(self, marks: list[tuple[str, str, float]], *,
                      until_ts: float | None = None) -> set[tuple[str, str, float]]:
        """Those of `marks` (job, host, ts) after which that host's part of that job
        recorded a step (by the cursor): one probe each, stopping at the first row, for
        the few agent alerts about a failed start that only a step can end."""
        if not marks:
            return set()
        cond, args = until_clause(until_ts)
        parts = []
        params: list[Any] = []
        for i, (job, host, ts) in enumerate(marks):
            parts.append(f"(SELECT {i} AS i, (SELECT 1 FROM train WHERE job = ? AND "
                         f"host = ? AND ts > ?{cond} LIMIT 1) AS hit)")
            params += [job, host, ts, *args]
        with self._cur() as cur:
            found = cur.execute(" UNION ALL ".join(parts), params).fetchall()
        return {marks[i] for i, hit in found if hit is not None}


def record_steps(extra: Any) -> int:
    """`STEPS_SQL` for a record already read: the optimizer steps its `extra` says it
    covers, else one."""
    value = extra.get("steps") if isinstance(extra, dict) else None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value != math.floor(value)
            or not 1 <= value <= MAX_STEPS_PER_RECORD):
        return 1
    return int(value)


def _to_series(found: Downsampled, n_columns: int) -> list[Series]:
    return [Series(tuple(xs), tuple(last), tuple(lo), tuple(hi))
            for xs, last, lo, hi in results(found.rows, n_columns)]


_Row = TypeVar("_Row", bound=tuple[Any, ...])  # a stored row, or a sample built from one


def newest_per_rank_step(rows: list[_Row]) -> list[_Row]:
    """Rows of `SAMPLE_COLUMNS` sorted by (step, rank, ts, seq), keeping the last, i.e.
    the newest run, of each (rank, step)."""
    # Each row's (step, rank) by one C call: a live refresh goes over a few thousand.
    keys = list(map(_STEP_RANK, rows))
    return [r for r, key, after in zip(rows, keys, [*keys[1:], None], strict=True)
            if key != after]


_STEP_RANK = itemgetter(2, 0)
