"""Reads about the machines: hosts, their agents' facts, latest GPU and host samples."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agent.wire.events import XID
from cockpit.store.queries_base import WINDOWS, ReaderBase, Row, until_clause
from cockpit.store.queries_frontiers import Frontiers
from cockpit.store.schema import kind_is

# Latest samples are looked for this far back at most: a GPU or host silent for longer
# is shown offline (its last values would mislead more than they help).
SAMPLE_WINDOWS: tuple[float | None, ...] = (120.0, 1800.0)
HEARTBEAT_TABLES = ("host_sample", "gpu", "train", "hello", "event")


class HealthQueries(ReaderBase):
    def hosts(self, *, until_ts: float | None = None,
              frontiers: Frontiers | None = None,
              recent: Mapping[str, float] | None = None) -> list[Row]:
        """One row per host known at `until_ts`: transport bookkeeping (live state,
        counters), the facts of its newest `hello`, and `last_seen`.

        With `frontiers` the hello facts are remembered until a new hello is visible:
        they change once per agent start, not once per refresh. `recent` (with
        `frontiers`) is the newest sample or step time per host that the caller already
        holds (a snapshot reads the latest GPU and host samples and steps anyway):
        `last_seen` is then that, the newest hello and the newest event, and only hosts
        absent from all three are looked for in the tables.
        """
        if frontiers is None:
            hellos = self._hellos(until_ts)
        else:
            hellos = self.memo("hellos", frontiers.key("hello"),
                               lambda: self._hellos(until_ts))
        with self._cur() as cur:
            if self.static:  # a store opened read-only: its link states cannot change
                links = self.memo("links", None, lambda: self._links(cur))
            else:
                links = self._links(cur)
            names = set(hellos)
            if until_ts is None:
                names |= set(links)
            if recent is not None and frontiers is not None:
                seen = self._seen_from(cur, sorted(names), recent, hellos, until_ts,
                                       frontiers)
            else:
                seen = self._last_seen(cur, sorted(names), until_ts, frontiers)
        out: list[Row] = []
        for name in sorted(names):
            hello = hellos.get(name, {})
            link = links.get(name, {})
            gpus = hello.get("gpus")
            out.append({
                "host": name,
                "address": link.get("address"),
                "state": link.get("state"),
                "detail": link.get("detail"),
                "state_ts": link.get("state_ts"),
                "high_water": link.get("high_water"),
                "malformed": link.get("malformed"),
                "lost": link.get("lost"),
                "last_error": link.get("last_error"),
                "hostname": hello.get("hostname"),
                "agent_version": hello.get("agent_version"),
                "boot_id": hello.get("boot_id"),
                "cpu_count": hello.get("cpu_count"),
                "mem_total": hello.get("mem_total"),
                "gpu_source": hello.get("gpu_source"),
                "gpu_state": hello.get("gpu_state"),
                "driver": hello.get("driver"),
                "gpus": gpus if isinstance(gpus, list) else [],
                "env": hello.get("env") if isinstance(hello.get("env"), dict) else {},
                "psutil": hello.get("psutil"),
                "hello_ts": hello.get("ts"),
                "last_seen": seen.get(name),
            })
        return out

    def first_wire_errors(self, hosts: Sequence[str], *,
                          until_ts: float | None = None) -> dict[str, tuple[float, int]]:
        """Per host with kept wire errors by `until_ts`: when the first arrived, and how
        many of those kept are records stored without some values (`store.repair`)."""
        if not hosts:
            return {}
        cond, args = until_clause(until_ts)
        marks = ", ".join("?" for _ in hosts)
        with self._cur() as cur:
            rows = cur.execute(
                f"SELECT host, min(ts), count(*) FILTER (WHERE error LIKE '% stored without %')"
                f" FROM wire_errors WHERE host IN ({marks}){cond} GROUP BY host",
                [*hosts, *args]).fetchall()
        return {str(host): (float(ts), int(n)) for host, ts, n in rows if ts is not None}

    def _links(self, cur: Any) -> dict[str, Row]:
        return {r["host"]: r for r in self.fetch(cur, "SELECT * FROM hosts")}

    def _hellos(self, until_ts: float | None) -> dict[str, Row]:
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            return {
                r["host"]: r
                for r in self.fetch(
                    cur,
                    f"SELECT * FROM hello WHERE true{cond} QUALIFY row_number() OVER "
                    "(PARTITION BY host ORDER BY ts DESC, seq DESC) = 1",
                    args,
                )
            }

    def _seen_from(self, cur: Any, hosts: list[str], recent: Mapping[str, float],
                   hellos: Mapping[str, Row], until_ts: float | None,
                   frontiers: Frontiers) -> dict[str, float]:
        def newer(held: dict[str, float], after: float) -> dict[str, float] | None:
            added = self.added_rows("event", after, until_ts, frontiers)
            if added is None:
                return None
            seen = dict(held)
            for r in added:
                if r["ts"] is not None and r["ts"] > seen.get(r["host"], -math.inf):
                    seen[r["host"]] = float(r["ts"])
            return seen

        events = self.kept("event_seen", None, "event", frontiers,
                           lambda: self._event_seen(until_ts), newer)
        seen: dict[str, float] = {}
        for host in hosts:
            times = [t for t in (recent.get(host), events.get(host),
                                 (hellos.get(host) or {}).get("ts")) if t is not None]
            if times:
                seen[host] = float(max(times))
        missing = [h for h in hosts if h not in seen]
        if missing:
            seen.update(self._last_seen(cur, missing, until_ts, frontiers))
        return seen

    def _event_seen(self, until_ts: float | None) -> dict[str, float]:
        cond, args = until_clause(until_ts)
        with self._cur() as cur:
            rows = cur.execute(
                f"SELECT host, max(ts) FROM event WHERE true{cond} GROUP BY host", args
            ).fetchall()
        return {host: float(ts) for host, ts in rows if ts is not None}

    def _last_seen(self, cur: Any, hosts: list[str], until_ts: float | None,
                   frontiers: Frontiers | None = None) -> dict[str, float]:
        """Newest record per host across the busy tables, probed in recent windows
        (one statement per window for all of them)."""
        if not hosts:
            return {}
        end = until_ts
        if end is None:
            if frontiers is not None:
                ends = [frontiers.ts.get(t) for t in HEARTBEAT_TABLES]
            else:
                ends = [self.table_frontier(cur, t, None) for t in HEARTBEAT_TABLES]
            known = [e for e in ends if e is not None]
            if not known:
                return {}
            end = max(known)
        seen: dict[str, float] = {}
        for window in WINDOWS:
            if window is None:
                break
            parts = " UNION ALL ".join(
                f'SELECT host, max(ts) AS ts FROM "{table}" WHERE ts <= ? AND ts > ? '
                "GROUP BY host"
                for table in HEARTBEAT_TABLES
            )
            for r in self.fetch(
                cur, f"SELECT host, max(ts) AS ts FROM ({parts}) GROUP BY host",
                [end, end - window] * len(HEARTBEAT_TABLES),
            ):
                if r["ts"] is not None and r["ts"] > seen.get(r["host"], float("-inf")):
                    seen[r["host"]] = float(r["ts"])
            if all(h in seen for h in hosts):
                return seen
        for host in hosts:
            if host not in seen:
                found = self.old_last_seen(cur, host, end)
                if found is not None:
                    seen[host] = found
        return seen

    def latest_gpus(self, *, until_ts: float | None = None,
                    frontiers: Frontiers | None = None) -> list[Row]:
        """Newest sample of every GPU sampled recently, by (host, gpu)."""
        if frontiers is not None:
            return self.latest_per_held("gpu", ("host", "gpu"), until_ts=until_ts,
                                        windows=SAMPLE_WINDOWS, frontiers=frontiers)
        with self._cur() as cur:
            return self.latest_per(cur, "gpu", ("host", "gpu"), until_ts=until_ts,
                                   windows=SAMPLE_WINDOWS)

    def latest_host_samples(self, *, until_ts: float | None = None,
                            frontiers: Frontiers | None = None) -> list[Row]:
        """Newest host sample of every host sampled recently."""
        if frontiers is not None:
            return self.latest_per_held("host_sample", ("host",), until_ts=until_ts,
                                        windows=SAMPLE_WINDOWS, frontiers=frontiers)
        with self._cur() as cur:
            return self.latest_per(cur, "host_sample", ("host",), until_ts=until_ts,
                                   windows=SAMPLE_WINDOWS)

    def gpu_events(self, *, until_ts: float | None = None, limit: int = 200,
                   frontiers: Frontiers | None = None) -> list[Row]:
        """Recent XID events (for the newest XID shown per GPU)."""
        with self._cur() as cur:
            return self.recent(
                cur, "event", until_ts=until_ts, where=f" AND {kind_is(XID)}",
                columns="host, seq, ts, kind, step, msg, data", limit=limit,
                enough=lambda rows: bool(rows), frontiers=frontiers,
            )

    def xid_history(self, *, until_ts: float | None = None,
                    before_ts: float | None = None) -> list[Row]:
        """Every GPU's XIDs over the whole recording, one row per (host, gpu): how many,
        how many before `before_ts` (the current run's start: an earlier run's), the
        newest code, the distinct codes (at most 8) and when the first and newest came.

        XID events belong to no job (the agent journals them for the GPU), so they
        survive a relaunch or a fork; read over the whole table, not a recent window, a
        GPU's old XID is not hidden by another GPU's new one. An event whose `gpu` or
        `xid` is not a whole number (it came from a host) is not counted. What
        `fold_xids` brings up to date: the two say the same."""
        cond, args = until_clause(until_ts)
        before = before_ts if before_ts is not None else float("-inf")
        with self._cur() as cur:
            return self.fetch(
                cur,
                "SELECT host, gpu, count(*) AS count, count(*) FILTER (WHERE ts < ?) "
                "AS earlier, arg_max(xid, ts) AS newest, min(ts) AS first_ts, "
                "max(ts) AS last_ts, max(ts) FILTER (WHERE ts < ?) AS earlier_last_ts, "
                "list_sort(list_distinct(list(xid)))[1:8] AS codes "
                "FROM (SELECT host, ts, "
                "TRY_CAST(json_extract_string(data, '$.gpu') AS INTEGER) AS gpu, "
                "TRY_CAST(json_extract_string(data, '$.xid') AS INTEGER) AS xid "
                f"FROM event WHERE {kind_is(XID)}{cond}) "
                "WHERE gpu IS NOT NULL AND xid IS NOT NULL GROUP BY host, gpu ORDER BY host, gpu",
                [before, before, *args])

    def gpu_events_held(self, *, until_ts: float | None, frontiers: Frontiers,
                        limit: int = 200) -> list[Row]:
        """`gpu_events`, kept up to date from the events added since (`kept`): the
        XIDs of the first window before the newest event that holds any, newest first,
        as the full read takes them. The window moves on with the newest event even
        when no XID came, so an XID leaves it when a fresh reader would leave it out."""
        end = frontiers.ts.get("event")

        def read() -> tuple[list[Row], float | None]:
            rows = self.gpu_events(until_ts=until_ts, limit=limit, frontiers=frontiers)
            # The window the read stopped at: the first that holds any of its rows.
            return rows, next((w for w in WINDOWS if w is None or end is None
                               or any(r["ts"] > end - w for r in rows)), None)

        def extend(held: tuple[list[Row], float | None],
                   after: float) -> tuple[list[Row], float | None] | None:
            rows, window = held
            added = self.added_rows("event", after, until_ts, frontiers)
            if added is None or end is None:
                return None
            new: list[Row] = [{k: r.get(k) for k in XID_EVENT_COLUMNS}
                              for r in added if r["kind"] == XID]
            merged = [*new, *rows]
            # The held rows are every XID of their window before the old end (less the
            # oldest, where the limit left them out): of each narrower window before
            # the new end too. A wider window than theirs needs the full read.
            for w in WINDOWS:
                if window is not None and (w is None or w > window):
                    return None
                kept = merged if w is None else [r for r in merged if r["ts"] > end - w]
                if kept or w is None:
                    if not new and w == window and len(kept) == len(rows):
                        return held
                    return sorted(kept, key=lambda r: (r["ts"], r["seq"]),
                                  reverse=True)[:limit], w
            return None

        return self.kept("gpu_events_held", (limit,), "event", frontiers, read, extend)[0]

    def xid_history_held(self, *, until_ts: float | None, before_ts: float | None,
                         frontiers: Frontiers) -> list[Row]:
        """`xid_history`, kept up to date from the events added since (`kept`): a new
        XID somewhere in a 1,024-GPU fleet is folded into its GPU's row (`fold_xids`)
        instead of every XID of the recording being grouped again, a few milliseconds
        of the refresh that saw it."""

        def extend(held: list[Row], after: float) -> list[Row] | None:
            added = self.added_rows("event", after, until_ts, frontiers)
            return None if added is None else fold_xids(
                held, [r for r in added if r["kind"] == XID], before_ts)

        return self.kept("xid_history_held", (before_ts,), "event", frontiers,
                         lambda: self.xid_history(until_ts=until_ts, before_ts=before_ts),
                         extend)

    def gpu_fault_changes(self, throttle_mask: int, *, after_ts: float | None = None,
                          until_ts: float | None = None,
                          hosts: Collection[str] | None = None) -> list[Row]:
        """The GPU samples (after `after_ts`; of `hosts` where given) where a GPU's
        throttling by `throttle_mask` began or ended or its uncorrectable ECC count
        rose, and each GPU's first sample in the range (its state there is known only
        to whoever held the samples before), oldest first: a few rows out of every
        sample of every GPU.

        Only the GPUs that were throttled or counted an error in the range are looked
        at in order (a GPU never in trouble has no change to find): a healthy fleet of a
        thousand GPUs costs one scan of two columns, not a sort of every sample."""
        cond, args = until_clause(until_ts)
        after_sql = " AND ts > ?" if after_ts is not None else ""
        after_args: list[Any] = [after_ts] if after_ts is not None else []
        if hosts is not None:
            named = sorted(hosts)
            listed = ", ".join("?" for _ in named)
            after_sql += f" AND host IN ({listed})" if named else " AND false"
            after_args = [*after_args, *named]
        flag = "(coalesce(throttle, 0) & ?) != 0"
        where = f"true{after_sql}{cond}"
        with self._cur() as cur:
            return self.fetch(
                cur,
                f"WITH troubled AS (SELECT DISTINCT host, gpu FROM gpu WHERE {where} "
                f"AND ({flag} OR coalesce(ecc_vol_unc, 0) > 0)) "
                f"SELECT host, gpu, ts, throttle, ecc_vol_unc FROM (SELECT host, gpu, ts, "
                f"seq, throttle, ecc_vol_unc, {flag} AS hot, "
                f"lag({flag}) OVER w AS was_hot, lag(coalesce(ecc_vol_unc, 0)) OVER w AS was_ecc "
                f"FROM gpu SEMI JOIN troubled USING (host, gpu) WHERE {where} "
                "WINDOW w AS (PARTITION BY host, gpu ORDER BY ts, seq)) "
                "WHERE was_hot IS NULL OR hot != was_hot "
                "OR coalesce(ecc_vol_unc, 0) > was_ecc ORDER BY ts, seq",
                [*after_args, *args, throttle_mask, throttle_mask, throttle_mask, *after_args,
                 *args],
            )


# The columns of `gpu_events`' rows.
XID_EVENT_COLUMNS = ("host", "seq", "ts", "kind", "step", "msg", "data")
_INT32 = range(-(2**31), 2**31)  # what TRY_CAST(... AS INTEGER) accepts


def fold_xids(held: list[Row], added: Sequence[Row],
              before_ts: float | None) -> list[Row] | None:
    """`xid_history`'s rows (`held`, never changed) with the XID events `added` after
    them counted in, or None where only the SQL can say (a GPU or code that is not a
    plain whole number, an XID no newer than its GPU's last: `arg_max` picks among
    equal times)."""
    if not added:
        return held  # most refreshes: events, none of them an XID
    before = before_ts if before_ts is not None else -math.inf
    rows = {(r["host"], r["gpu"]): r for r in held}
    for e in sorted(added, key=lambda r: (r["ts"], r["seq"])):
        data, ts = e.get("data"), e.get("ts")
        if data is None:
            continue  # no JSON: the SQL reads NULLs and leaves it out
        if not isinstance(data, dict) or ts is None:
            return None
        index, xid = data.get("gpu"), data.get("xid")
        if index is None or xid is None:
            continue
        if type(index) is not int or type(xid) is not int or index not in _INT32 \
                or xid not in _INT32:
            return None  # "3", 3.0, true, 2**40: as DuckDB casts them, not as Python would
        key = (e["host"], index)
        early = ts < before
        old = rows.get(key)
        if old is None:
            rows[key] = {"host": e["host"], "gpu": index, "count": 1,
                         "earlier": int(early), "newest": xid, "first_ts": ts,
                         "last_ts": ts, "earlier_last_ts": ts if early else None,
                         "codes": [xid]}
            continue
        if ts <= old["last_ts"]:
            return None
        codes = old["codes"] if xid in old["codes"] else sorted([*old["codes"], xid])[:8]
        rows[key] = {**old, "count": old["count"] + 1,
                     "earlier": old["earlier"] + int(early), "newest": xid, "last_ts": ts,
                     "earlier_last_ts": ts if early else old["earlier_last_ts"],
                     "codes": codes}
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0] is None, k[0], k[1]))]
