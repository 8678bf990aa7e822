"""Reads about what happened: events, agent alerts, job output, interruptions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.wire import launch_reasons
from agent.wire.events import (
    CHECKPOINT_SAVED,
    CONTROL_ACK,
    INTERRUPTION,
    JOB_ADOPTED,
    JOB_EXITED,
    JOB_STARTED,
    PAUSE,
    RECOVERY,
    RELAUNCH,
    RESUME,
)
from cockpit.store.queries_base import ReaderBase, Row, until_clause
from cockpit.store.queries_frontiers import Frontiers
from cockpit.store.schema import kind_is

LIFECYCLE_KINDS = (
    JOB_STARTED, JOB_EXITED, PAUSE, RESUME, INTERRUPTION, RECOVERY, RELAUNCH, JOB_ADOPTED,
)
# What `interruptions` pairs: the outages, their recoveries, and what else ends one.
INTERRUPTION_KINDS = (INTERRUPTION, RECOVERY, PAUSE, JOB_EXITED, JOB_STARTED)


def _text_filter(column: str, text: str | None) -> tuple[str, list[Any]]:
    if not text:
        return "", []
    return f" AND {column} ILIKE ?", [f"%{text}%"]


def _kinds_filter(kinds: Sequence[str] | None) -> tuple[str, list[Any]]:
    if not kinds:
        return "", []
    return f" AND kind IN ({', '.join('?' for _ in kinds)})", list(kinds)


class EventQueries(ReaderBase):
    def events(
        self,
        *,
        until_ts: float | None = None,
        kinds: Sequence[str] | None = None,
        limit: int = 100,
        job: str | None = None,
        text: str | None = None,
        frontiers: Frontiers | None = None,
    ) -> list[Row]:
        """The newest `limit` events (optionally of some kinds, one job, containing a
        text), oldest first. Of one job: its events and those of no job (a host's XID, a
        link), which concern every job on the host."""
        kind_sql, kind_args = _kinds_filter(kinds)
        text_sql, text_args = _text_filter("msg", text)
        job_sql, job_args = (" AND (job = ? OR job IS NULL)", [job]) if job else ("", [])
        with self._cur() as cur:
            rows = self.recent(
                cur, "event", until_ts=until_ts, where=kind_sql + text_sql + job_sql,
                params=[*kind_args, *text_args, *job_args], limit=limit, frontiers=frontiers,
            )
        return rows[::-1]

    def events_held(self, name: str, *, until_ts: float | None, limit: int,
                    frontiers: Frontiers, kinds: Sequence[str] | None = None) -> list[Row]:
        """`events(...)` of every job, kept under `name` and brought up to date from the
        events added since (`kept`): a refresh that sees one new event merges it in
        rather than reading the newest `limit` again."""
        wanted = frozenset(kinds) if kinds else None

        def read() -> list[Row]:
            return self.events(until_ts=until_ts, kinds=kinds, limit=limit,
                               frontiers=frontiers)

        def extend(held: list[Row], after: float) -> list[Row] | None:
            added = self.added_rows("event", after, until_ts, frontiers)
            if added is None:
                return None
            new = [r for r in added if wanted is None or r["kind"] in wanted]
            if not new:
                return held
            # The held rows are the newest `limit` before `after`, every added one is
            # after it: the newest `limit` of both are the newest of all.
            return sorted([*held, *new], key=lambda r: (r["ts"], r["seq"]))[-limit:]

        return self.kept(name, (limit, wanted), "event", frontiers, read, extend)

    def alerts(self, *, until_ts: float | None = None, limit: int = 100,
               frontiers: Frontiers | None = None) -> list[Row]:
        """The agents' own alerts, newest `limit`, oldest first."""
        with self._cur() as cur:
            rows = self.recent(cur, "alert", until_ts=until_ts, limit=limit,
                               frontiers=frontiers)
        return rows[::-1]

    def logs(
        self,
        job: str | None = None,
        *,
        until_ts: float | None = None,
        limit: int = 200,
        text: str | None = None,
    ) -> list[Row]:
        """The last `limit` lines of job output (optionally containing a text), oldest
        first."""
        text_sql, text_args = _text_filter("line", text)
        job_sql, job_args = (" AND job = ?", [job]) if job else ("", [])
        with self._cur() as cur:
            rows = self.recent(
                cur, "log", until_ts=until_ts, where=job_sql + text_sql,
                params=[*job_args, *text_args], limit=limit,
                columns="host, seq, ts, job, rank, stream, line",
            )
        return rows[::-1]

    def lifecycle(self, job: str, *, until_ts: float | None = None,
                  frontiers: Frontiers | None = None) -> Row | None:
        """The job's newest lifecycle event (started, exited, paused, interrupted…)."""
        kind_sql, kind_args = _kinds_filter(LIFECYCLE_KINDS)
        with self._cur() as cur:
            rows = self.recent(
                cur, "event", until_ts=until_ts, where=" AND job = ?" + kind_sql,
                params=[job, *kind_args], limit=1, frontiers=frontiers,
            )
        return rows[0] if rows else None

    def control_acks(self, ids: Sequence[str]) -> dict[str, Row]:
        """Acknowledgements of the given control-op ids (id -> ack event), as stored."""
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        with self._cur() as cur:
            rows = self.fetch(
                cur,
                f"SELECT * FROM event WHERE {kind_is(CONTROL_ACK)} "
                f"AND json_extract_string(data, '$.id') IN ({marks}) ORDER BY ts, seq",
                list(ids),
            )
        return {r["data"]["id"]: r for r in rows if isinstance(r.get("data"), dict)}

    def rare_events(self, kinds: Sequence[str], job: str | None,
                    until_ts: float | None) -> list[Row]:
        """All events of a few rare kinds (interruptions, checkpoints, acks: tens, not
        millions), of `job` or of none, oldest first."""
        kind_sql, kind_args = _kinds_filter(kinds)
        cond, args = until_clause(until_ts)
        job_sql, job_args = (" AND (job = ? OR job IS NULL)", [job]) if job else ("", [])
        with self._cur() as cur:
            return self.fetch(
                cur,
                f"SELECT * FROM event WHERE true{kind_sql}{job_sql}{cond} ORDER BY ts, seq",
                [*kind_args, *job_args, *args],
            )

    def interruptions(self, job: str | None = None, *,
                      until_ts: float | None = None) -> list[Row]:
        """Each interruption paired with the recovery that followed it (if any yet), or
        with what ended it instead (`ended_by`: the operator paused, stopped or started
        the job again while the agent waited to restart it or had given up; another
        host's part ended): such an outage is over without a recovery, and a later
        failure is an interruption of its own, not a restart of that outage."""
        out: list[Row] = []
        open_by_host: dict[str, Row] = {}
        # Per host, the outage the operator ended: the agent still reports its recovery
        # at the first step after a resume or relaunch (its restart had begun), and that
        # recovery is of this outage, not one of its own.
        ended_by_host: dict[str, Row] = {}
        item: Row | None
        for e in self.rare_events(INTERRUPTION_KINDS, job, until_ts):
            data = e["data"] if isinstance(e["data"], dict) else {}
            if e["kind"] not in (INTERRUPTION, RECOVERY):
                ongoing = open_by_host.get(e["host"])
                end = _ended_by(e["kind"], data)
                if ongoing is not None and end is not None and ongoing["job"] == e["job"]:
                    ongoing["ended_by"] = end
                    ended_by_host[e["host"]] = open_by_host.pop(e["host"])
                continue
            if e["kind"] == INTERRUPTION:
                ended_by_host.pop(e["host"], None)
                ongoing = open_by_host.get(e["host"])
                if ongoing is not None and ongoing["job"] == e["job"] and ongoing["retrying"]:
                    # A restart that failed before its first step: the same outage, which
                    # the agent's recovery will measure from its first failure.
                    ongoing["failed_restarts"].append(data.get("cause") or "unknown")
                    ongoing["retrying"] = _retrying(data)
                    ongoing["gave_up"] = _gave_up(data)
                    ongoing["budget"] = _budget(data) or ongoing.get("budget")
                    continue
                item = {
                    "host": e["host"], "job": e["job"], "step": e["step"],
                    "cause": data.get("cause") or e["msg"] or "unknown",
                    "evidence": _text(data.get("evidence")),
                    "detected_at": data.get("detected_at") or e["ts"],
                    "detection_latency": data.get("detection_latency"),
                    "recovered_in": None, "steps_lost": None, "restart_count": None,
                    "checkpoint": None, "recovered_at": None, "failed_restarts": [],
                    "retrying": _retrying(data), "ended_by": None,
                    "budget": _budget(data), "gave_up": _gave_up(data),
                    "excluded": bool(data.get("exclusion")),
                }
                out.append(item)
                open_by_host[e["host"]] = item
                continue
            item = open_by_host.pop(e["host"], None)
            ended = ended_by_host.pop(e["host"], None)
            if item is None and ended is not None and ended["job"] == e["job"]:
                continue  # that outage is over already, by the operator's end of it
            if item is None:
                # A recovery whose interruption was never seen (e.g. retained away).
                item = {
                    "host": e["host"], "job": e["job"], "step": e["step"],
                    "cause": data.get("cause") or "unknown", "evidence": None,
                    "detected_at": e["ts"] - (data.get("recovery_seconds") or 0.0),
                    "detection_latency": None, "failed_restarts": [], "ended_by": None,
                }
                out.append(item)
            item.update(
                recovered_in=data.get("recovery_seconds"), steps_lost=data.get("steps_lost"),
                restart_count=data.get("restart_count"), checkpoint=data.get("checkpoint"),
                recovered_at=e["ts"],
            )
            if not item.get("cause") or item["cause"] == "unknown":
                item["cause"] = data.get("cause") or "unknown"
        for item in out:
            item.pop("retrying", None)
            if item.get("recovered_at") is None and not item.get("ended_by"):
                item["came_back_at"] = self._first_step_after(
                    item["job"], float(item["detected_at"] or 0.0), until_ts)
        return out

    def _first_step_after(self, job: str | None, ts: float,
                          until_ts: float | None) -> float | None:
        """When the job (any host of it) next recorded a step after `ts`: it trained
        again (`merge_incidents` reads an outage no recovery ended as over then)."""
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            row = cur.execute(f"SELECT min(ts) FROM train WHERE job IS NOT DISTINCT FROM ? "
                              f"AND ts > ?{cond}", [job, ts, *args]).fetchone()
        return float(row[0]) if row is not None and row[0] is not None else None

    def checkpoint_costs(self, job: str | None = None, *,
                         until_ts: float | None = None) -> list[Row]:
        """Every saved checkpoint: when, at which step, how long it took, how big."""
        out = []
        for e in self.rare_events((CHECKPOINT_SAVED,), job, until_ts):
            data = e["data"] if isinstance(e["data"], dict) else {}
            out.append({
                "ts": e["ts"], "host": e["host"], "step": e["step"],
                "seconds": _number(data.get("seconds")), "bytes": data.get("bytes"),
                "path": data.get("path"),
            })
        return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


# The end of a host's part, other than a recovery, that ends an outage: a pause or stop
# (the agent says it ended its processes for it, or a pause cancelled the restart), the
# operator's start of the job, or the end of another host's part (agent.job.peer_end):
# each named by the agent's word for it (`agent.wire.launch_reasons`).


def _ended_by(kind: str, data: dict[str, Any]) -> str | None:
    if kind == PAUSE:
        took = data.get("ok") is not False and data.get("mode") != "freeze"
        return launch_reasons.FOR_PAUSE if took else None
    if kind == JOB_EXITED:
        ended_for = str(data.get("ended_for"))
        return ended_for if ended_for in launch_reasons.OUTAGE_ENDS else None
    if kind == JOB_STARTED and data.get("reason") in launch_reasons.OPERATOR_STARTS:
        return str(data["reason"])
    return None


def _retrying(data: dict[str, Any]) -> bool:
    """Whether the agent decided to restart after this interruption: only then is a next
    interruption of the same host, before any recovery, part of the same outage."""
    decision = data.get("decision")
    return isinstance(decision, dict) and decision.get("retry") is True


def _gave_up(data: dict[str, Any]) -> bool:
    """Whether the agent decided not to restart after this interruption."""
    decision = data.get("decision")
    return isinstance(decision, dict) and decision.get("retry") is False


def _budget(data: dict[str, Any]) -> dict[str, Any] | None:
    """The job-wide restart budget as the agent's decision found it (as sent: checked
    where it is shown, `cockpit.analysis.restart_budget`)."""
    decision = data.get("decision")
    budget = decision.get("budget") if isinstance(decision, dict) else None
    return budget if isinstance(budget, dict) else None


def _text(value: Any) -> str | None:
    """Evidence as one line: the agent sends a list of findings, first the strongest."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value if v not in (None, "")) or None
    return str(value)
