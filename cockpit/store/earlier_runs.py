"""A job launched afresh under a name that already has a recorded run: the earlier run is
filed under a name of its own, so the new run's charts and figures start clean.

Charts read a job's steps by (job, rank) and step (`cockpit.store.levels`): a run that
starts again from step 0 under the same name would be drawn over the earlier run's
curve, its throughput and ETA mixed with the earlier run's steps, and the earlier run's
critical alerts would still stand against the new one. Operators do reuse names (edit
the spec, launch again), so when the agent journals a fresh start of a job — a
`job_started` of an operator's `launch` from no checkpoint — whose name has steps
recorded before it, the store renames everything of that job recorded before the start
to `JOB (earlier run N)`, in the flush's own transaction: the chart levels before the
flush's rows are folded into them (they are the new run's), the rows by time after the
flush's are stored (its own may include the earlier run's last); forks made of it name
it as their parent. Nothing is deleted; a report or replay names both jobs. N is taken
past any such name already in the store.

A host whose link was down through the launch sends the earlier run's last rows only
once it is back, after the filing. The filing is kept (`filed_run`), and every later
flush stores such rows under the filed name as they arrive (`late_rows_job`), before
their chart levels are folded: the new run's chart never shows the earlier run's steps.
Which rows are late is decided per host by its stream's order, not by clocks, once the
host has journaled its own start of the launch; before that, by their time against the
launch's start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import duckdb
import orjson

from agent.wire import launch_reasons
from agent.wire.events import CHECKPOINTS_SET_ASIDE, CONTROL_ACK, FORK, JOB_STARTED
from cockpit.store.schema import (
    LEVEL_SERIES,
    kind_is,
    levels_open_table,
    levels_table,
    pending_table,
)

# Tables whose rows belong to a job's run, renamed up to the fresh start by their ts.
RUN_TABLES = ("train", "eval", "run", "event", "log", "alert")
# Events journaled just before the start that belong to it: the setting aside of the
# earlier run's checkpoints and the launch's acknowledgement (not another operation's: a
# stop acknowledged just before the launch is the earlier run's).
_LAUNCH_EVENTS = (f"({kind_is(CHECKPOINTS_SET_ASIDE)} OR ({kind_is(CONTROL_ACK)} AND "
                  "json_extract_string(data, '$.op') = 'launch'))")
LAUNCH_EVENT_WINDOW_S = 60.0
# s between two fresh starts of a job that are one launch: each host journals its own
# start, on its own clock (the agents allow 30 s of skew, `agent.job.peer_end`), and the new
# run's first steps may be stamped before a later host's start.
SAME_LAUNCH_S = 60.0
_EARLIER = re.compile(r"(.+) \(earlier run \d+\)")
_START_WORD = f'"{JOB_STARTED}"'.encode()  # in every line that can hold a start event


def earlier_run_name(job: str, number: int) -> str:
    return f"{job} (earlier run {number})"


def is_earlier_run(job: object) -> bool:
    """Whether `job` names a run filed away by a fresh launch of its name: it is over."""
    return isinstance(job, str) and _EARLIER.fullmatch(job) is not None


def launched_again_as(job: str) -> str | None:
    """The name a filed run's job was launched again under (its own before the filing),
    or None for any other job."""
    found = _EARLIER.fullmatch(job)
    return found.group(1) if found else None


@dataclass(frozen=True)
class StartLine:
    """A fresh start a host journaled: the agent's `job_started` of an operator's `launch`
    that restores no checkpoint (a launch from the newest checkpoint continues the
    earlier run and is not one)."""

    host: str
    job: str
    ts: float
    seq: int  # as stored (the host's seq offset added)


def start_lines(pieces: Iterable[tuple[str, int, Iterable[bytes]]]) -> list[StartLine]:
    """The fresh starts among event lines, given as (host, seq offset, lines). Lines that
    do not parse are left to the loader, which reports them."""
    found: list[StartLine] = []
    for host, offset, lines in pieces:
        for line in lines:
            if _START_WORD not in line:
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(record, dict):
                continue
            data, job, ts, seq = (record.get(k) for k in ("data", "job", "ts", "seq"))
            if (record.get("kind") == JOB_STARTED and isinstance(data, dict)
                    and data.get("reason") == launch_reasons.LAUNCH
                    and data.get("checkpoint") is None
                    and isinstance(job, str) and isinstance(ts, (int, float))
                    and isinstance(seq, int) and not isinstance(seq, bool)):
                found.append(StartLine(host, job, float(ts), seq + offset))
    return found


def fresh_starts(starts: Iterable[StartLine]) -> list[tuple[str, float]]:
    """(job, ts) of the launches among `starts`: of the starts of one job within
    `SAME_LAUNCH_S` of each other (every host's start of one launch, often in one flush),
    the first only."""
    first: list[tuple[str, float]] = []
    for start in sorted(starts, key=lambda s: s.ts):
        if not any(j == start.job and start.ts - t <= SAME_LAUNCH_S for j, t in first):
            first.append((start.job, start.ts))
    return first


@dataclass
class Filing:
    """A run filed away by a fresh launch, kept so that the rows of it that arrive later
    are filed too. `started`: the hosts that journaled their own start of that launch,
    with its stored seq; their rows of the job from before it are the filed run's."""

    job: str
    name: str
    start: float
    started: dict[str, int] = field(default_factory=dict)

    def copy(self) -> Filing:
        return Filing(self.job, self.name, self.start, dict(self.started))

    def note_start(self, start: StartLine) -> None:
        """Take `start` as its host's start of this launch, when it is one."""
        if (start.job == self.job and abs(start.ts - self.start) <= SAME_LAUNCH_S
                and start.seq < self.started.get(start.host, start.seq + 1)):
            self.started[start.host] = start.seq


_FRESH_START_SQL = (
    f"{kind_is(JOB_STARTED)} AND json_extract_string(data, '$.reason') = '{launch_reasons.LAUNCH}' "
    "AND json_extract_string(data, '$.checkpoint') IS NULL"
)


def load_filings(cur: duckdb.DuckDBPyConnection) -> list[Filing]:
    """The runs filed in this store, oldest first, each with the hosts that started its
    launch (their start events may be filed under either name, clocks being what they
    are)."""
    filings = [Filing(job, name, float(start)) for job, name, start in cur.execute(
        "SELECT job, name, start FROM filed_run ORDER BY start").fetchall()]
    for filing in filings:
        filing.started = {host: int(seq) for host, seq in cur.execute(
            f"SELECT host, min(seq) FROM event WHERE job IN (?, ?) AND {_FRESH_START_SQL} "
            "AND ts BETWEEN ? AND ? GROUP BY host",
            [filing.job, filing.name, filing.start - SAME_LAUNCH_S,
             filing.start + SAME_LAUNCH_S]).fetchall()}
    return filings


def _before_sql(filing: Filing, i: int, table: str, host_sql: str, seq_sql: str,
                params: dict[str, object]) -> str:
    """SQL true for a row of `filing`'s job recorded before its launch (its parameters
    added to `params`, named by `i`).

    A host that journaled its start of the launch is in stream order: its rows before
    that start are the earlier run's, whatever its clock. Another host's are when stamped
    before the launch's start, the launch's own events excepted. `host_sql` and `seq_sql`
    give the row's host and stored seq.
    """
    params[f"filed_start{i}"] = filing.start
    before = f"ts < $filed_start{i}"
    if filing.started:
        hosts = []
        for k, (host, seq) in enumerate(sorted(filing.started.items())):
            params.update({f"filed_host{i}_{k}": host, f"filed_seq{i}_{k}": seq})
            hosts.append(f"WHEN {host_sql} = $filed_host{i}_{k} "
                         f"THEN {seq_sql} < $filed_seq{i}_{k}")
        before = f"(CASE {' '.join(hosts)} ELSE {before} END)"
    if table == "event":
        before += (f" AND NOT ({_LAUNCH_EVENTS} AND "
                   f"ts >= $filed_start{i} - {LAUNCH_EVENT_WINDOW_S})")
    return before


def late_rows_job(filings: Sequence[Filing], table: str, host_sql: str,
                  seq_sql: str) -> tuple[str, dict[str, object]] | None:
    """The SQL that gives a row being stored in `table` its job: the filed run's name for
    a row of a filed run that arrives late, else its own (with its parameters); None
    when nothing was filed. Filings are tried oldest first, so a row goes to the run it
    was recorded in.
    """
    if not filings or table not in RUN_TABLES:
        return None
    params: dict[str, object] = {}
    whens: list[str] = []
    for i, filing in enumerate(filings):
        params.update({f"filed_job{i}": filing.job, f"filed_name{i}": filing.name})
        before = _before_sql(filing, i, table, host_sql, seq_sql, params)
        whens.append(f"WHEN job = $filed_job{i} AND {before} THEN $filed_name{i}")
    return f"CASE {' '.join(whens)} ELSE job END", params


def steps_before(lines: Iterable[bytes], job: str, start: float) -> bool:
    """Whether train lines (of a flush) hold a step of `job` stamped before `start`: a
    backlog may bring an earlier run whole, with the launch that follows it. Only the
    lines naming the job are parsed (this runs for a flush with a fresh start only)."""
    name = orjson.dumps(job)
    for line in lines:
        if name not in line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict) or record.get("job") != job:
            continue
        ts = record.get("ts")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts < start:
            return True
    return False


def file_earlier_run(cur: duckdb.DuckDBPyConnection, job: str, start: float,
                     earlier_in_flush: bool = False) -> str | None:
    """The name `job`'s run before its fresh start at `start` is filed under, its chart
    levels renamed (before a flush stores the new run's rows); None when the job has no
    steps before it, stored or in the flush (`earlier_in_flush`): its first launch, or a
    second host's start of the same launch, after the first host's filed the earlier
    run. The flush's own rows are stored under the name that fits them
    (`late_rows_job`), and `rename_earlier_rows` renames the stored ones."""
    same_launch = cur.execute(
        f"SELECT 1 FROM event WHERE job = ? AND {kind_is(JOB_STARTED)} AND ts BETWEEN ? AND ? "
        f"AND json_extract_string(data, '$.reason') = '{launch_reasons.LAUNCH}' "
        "AND json_extract_string(data, '$.checkpoint') IS NULL LIMIT 1",
        [job, start - SAME_LAUNCH_S, start + SAME_LAUNCH_S]).fetchone()
    if same_launch is not None:
        return None  # another host's start of this launch filed the earlier run already
    earlier = earlier_in_flush or cur.execute(
        "SELECT 1 FROM train WHERE job = ? AND ts < ? LIMIT 1", [job, start]).fetchone()
    if not earlier:
        return None
    prefix = earlier_run_name(job, 0)[:-2]
    taken = {row[0] for row in cur.execute(
        "SELECT DISTINCT job FROM run WHERE starts_with(job, ?) UNION "
        "SELECT DISTINCT job FROM train WHERE starts_with(job, ?)", [prefix, prefix]).fetchall()}
    number = 1
    while earlier_run_name(job, number) in taken:
        number += 1
    name = earlier_run_name(job, number)
    cur.execute("INSERT INTO filed_run VALUES (?, ?, ?)", [job, name, start])
    # The level rows of the job are all the earlier run's: the flush's own rows are
    # stored after this, and none of the new run's came before its start.
    for table, spec in LEVEL_SERIES.items():
        if "job" not in spec["keys"]:
            continue
        for levels in (levels_table(table), levels_open_table(table), pending_table(table)):
            cur.execute(f'UPDATE "{levels}" SET job = ? WHERE job = ?', [name, job])
    return name


def rename_earlier_rows(cur: duckdb.DuckDBPyConnection, filing: Filing) -> None:
    """File the job's rows from before its fresh launch under the filing's name, those of
    the flush that brought the start included, except the launch's own events.

    A fork made before the start is the earlier run's fork: its `fork` event names its
    parent by the job's name, which now means the new run, so it is made to name the
    filed one (a fork's curve and report compare it with the run it came from)."""
    for table in RUN_TABLES:
        params: dict[str, object] = {"name": filing.name, "job": filing.job}
        before = _before_sql(filing, 0, table, "host", "seq", params)
        cur.execute(f'UPDATE "{table}" SET job = $name WHERE job = $job AND {before}', params)
    cur.execute("UPDATE event SET data = json_merge_patch(data, json_object('parent', ?)) "
                f"WHERE {kind_is(FORK)} AND ts < ? AND json_extract_string(data, '$.parent') = ?",
                [filing.name, filing.start, filing.job])
