"""Bulk-load the new lines of one record type, from every host of a flush, into its table.

Measured here (realistic 450-byte gpu/train/host lines): DuckDB's `read_json` over a
file with explicit column types parses ~0.6 M lines/s per core and the typed INSERT from
it reaches ~0.4 M, while the same reader over an `io.BytesIO` relation spends as long
registering the buffer as inserting and orjson → Arrow → INSERT reaches ~0.2 M. So lines
are written to a private scratch file (on /dev/shm when there is one) and read back by
SQL with explicit column types.

Every statement also has a fixed cost (~10 ms: binding a 30-column reader, opening the
file, scheduling threads), which is why a flush loads each record type once for all its
hosts rather than once per host: with a single host and seq offset the values are bound
as parameters; with several, each line gets a tag prepended (`{"@p":i,"@host":..,
"@off":..,` in place of its `{`: one `bytes.replace` per host, no per-line Python) and
the reader takes host and offset from it. Tagged loads of the charted tables go through
a per-flush temp table, so their chart levels are folded from exactly the rows stored,
not from a scan of the table (`cockpit.store.levels`).

A line that does not convert to its table's types makes the strict reader fail, and in
DuckDB a failed statement poisons the whole transaction. Loading is therefore
optimistic: the fast path assumes clean data; the caller rolls back and retries with
`careful=True`, where every type is first checked on a separate connection and the bad
lines are isolated (orjson for lines that are not JSON objects, then bisection with the
same strict reader, so a line is malformed exactly when DuckDB cannot type it).

A record is stored only when its `ts`, and its `step` where its table has one, lie in
the ranges of `cockpit.ingest.bounds` (the keys the chart levels fold on: one `ts` of
1e300 made every later fold of the store fail); the others are reported malformed with
their reason. The test is part of each load's SQL: no per-record Python.

(One module of some 500 lines: the fast load and its careful retry share every statement
and must agree on what a bad line is.)
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson

from cockpit.ingest.bounds import STEP_MAX, TS_MAX, TS_MIN
from cockpit.ingest.route import Malformed
from cockpit.store.earlier_runs import Filing, late_rows_job
from cockpit.store.repair import repair
from cockpit.store.schema import LEVEL_SERIES, RECORD_COLUMNS, TABLE_FOR_TYPE

_KEY_TYPES = {"seq": "BIGINT", "ts": "DOUBLE"}
# The tag a line carries in a load of several pieces. A record with a key of the same
# name would have a duplicate key, which the strict reader rejects (the line is then
# reported malformed, never stored under another host).
_TAG_TYPES = {"@p": "INTEGER", "@host": "VARCHAR", "@off": "BIGINT"}


def _columns_literal(table: str, tagged: bool) -> str:
    cols = {**(_TAG_TYPES if tagged else {}), **_KEY_TYPES, **RECORD_COLUMNS[table]}
    return "{" + ", ".join(f"'{name}': '{typ}'" for name, typ in cols.items()) + "}"


def _reader(table: str, tagged: bool) -> str:
    return (f"read_json($path, columns={_columns_literal(table, tagged)}, "
            "format='newline_delimited')")


def _valid(table: str) -> str:
    """SQL true for a row whose keys are in range (NULL, not false, when `ts` is)."""
    sql = f"ts BETWEEN {TS_MIN!r} AND {TS_MAX!r}"
    if "step" in RECORD_COLUMNS[table]:
        sql += f" AND (step IS NULL OR step BETWEEN 0 AND {STEP_MAX})"
    return sql


def _why_invalid(wire_type: str, seq: int, ts: float | None, step: int | None) -> str:
    """Why a row failed `_valid`, for the user."""
    if ts is None:
        return f"{wire_type} record seq {seq} has no numeric `ts`"
    if not TS_MIN <= ts <= TS_MAX:
        return (f"{wire_type} record seq {seq} has a `ts` out of range "
                f"({TS_MIN:.0f}..{TS_MAX:.0f} s since the epoch): {ts!r}")
    return f"{wire_type} record seq {seq} has a `step` out of range (0..{STEP_MAX}): {step}"


def _names(table: str) -> str:
    return ", ".join(f'"{c}"' for c in RECORD_COLUMNS[table])


def _host_seq(tagged: bool) -> tuple[str, str]:
    """SQL for a line's host and its stored seq, in a load of one piece or of several."""
    host, offset = ('"@host"', '"@off"') if tagged else ("$host", "$offset")
    return host, f"seq + {offset}"


def _select_sql(table: str, tagged: bool, job_sql: str | None = None) -> str:
    host, seq = _host_seq(tagged)
    names = _names(table)
    if job_sql is not None:
        names = names.replace('"job"', f'{job_sql} AS "job"', 1)
    return (
        f"SELECT {host} AS host, {seq} AS seq, ts, {names} "
        f"FROM {_reader(table, tagged)} WHERE {_valid(table)}"
    )


def _insert_sql(table: str, tagged: bool, job_sql: str | None = None) -> str:
    return (f'INSERT INTO "{table}" (host, seq, ts, {_names(table)}) '
            f"{_select_sql(table, tagged, job_sql)}")


def staging_table(table: str) -> str:
    """The temp table (of the loading connection) holding the rows a flush stored."""
    return f"cockpit_new_{table}"


def _stage_sql(table: str, job_sql: str | None = None) -> str:
    return (f'CREATE OR REPLACE TEMP TABLE "{staging_table(table)}" AS '
            f"{_select_sql(table, True, job_sql)}")


def _unstage_sql(table: str) -> str:
    return (f'INSERT INTO "{table}" (host, seq, ts, {_names(table)}) '
            f'SELECT host, seq, ts, {_names(table)} FROM "{staging_table(table)}"')


_OTHER_SELECT = (
    "SELECT $host AS host, (json->>'seq')::BIGINT + $offset AS seq, "
    "TRY_CAST(json->>'ts' AS DOUBLE) AS ts, json->>'t' AS t, json AS raw "
    "FROM read_ndjson_objects($path)"
)
_TS_VALID = f"ts BETWEEN {TS_MIN!r} AND {TS_MAX!r}"
_OTHER_INSERT = f"INSERT INTO other SELECT * FROM ({_OTHER_SELECT}) WHERE {_TS_VALID}"
_EXTRA_INSERT = (
    "INSERT INTO other SELECT $host, (json->>'seq')::BIGINT + $offset, "
    "TRY_CAST(json->>'ts' AS DOUBLE), $label, json FROM read_ndjson_objects($path) "
    "WHERE NOT list_has_all($known, json_keys(json)) "
    f"AND TRY_CAST(json->>'ts' AS DOUBLE) BETWEEN {TS_MIN!r} AND {TS_MAX!r}"
)
_TAGGED_EXTRA_INSERT = (
    "INSERT INTO other SELECT json->>'@host', (json->>'seq')::BIGINT + (json->>'@off')::BIGINT, "
    "TRY_CAST(json->>'ts' AS DOUBLE), $label, "
    "'{' || substr(json::VARCHAR, list_extract($cut, (json->>'@p')::INTEGER + 1) + 1) "
    "FROM read_ndjson_objects($path) "
    "WHERE list_contains($checked, (json->>'@p')::INTEGER) "
    "AND NOT list_has_all($known, json_keys(json)) "
    f"AND TRY_CAST(json->>'ts' AS DOUBLE) BETWEEN {TS_MIN!r} AND {TS_MAX!r}"
)
_INSERTS = {(table, tagged): _insert_sql(table, tagged)
            for table in RECORD_COLUMNS for tagged in (False, True)}
_STAGES = {table: _stage_sql(table) for table in LEVEL_SERIES}


def insert_statement(table: str) -> tuple[str, Callable[..., dict[str, object]]]:
    """The INSERT a flush runs for one host's new lines of `table` (read from `$path`),
    with the function that picks its parameters from `path`, `host` and `offset`: what the
    ingest benchmark times alone, as the CPU DuckDB itself needs to store the records."""
    query = _INSERTS[(table, False)]
    return query, lambda **values: _params(query, **values)
_UNSTAGES = {table: _unstage_sql(table) for table in LEVEL_SERIES}


def _check_sql(table: str, tagged: bool) -> str:
    # Counting every column makes the reader convert every value (count(*) would not).
    names = [*(_TAG_TYPES if tagged else ()), "seq", "ts", *RECORD_COLUMNS[table]]
    counts = ", ".join(f'count("{c}")' for c in names)
    return f"SELECT {counts} FROM {_reader(table, tagged)}"


_PIECE = {True: '"@p"', False: "0"}
_CHECKS = {(table, tagged): _check_sql(table, tagged)
           for table in RECORD_COLUMNS for tagged in (False, True)}
_NULL_TS = {
    (table, tagged): (
        f"SELECT {_PIECE[tagged]}, seq, ts, "
        f"{'step' if 'step' in RECORD_COLUMNS[table] else 'NULL'} "
        f"FROM {_reader(table, tagged)} WHERE ({_valid(table)}) IS NOT TRUE")
    for table in RECORD_COLUMNS for tagged in (False, True)
}
_OTHER_CHECK = f"SELECT count(seq), count(ts), count(t), count(raw) FROM ({_OTHER_SELECT})"
_OTHER_NULL_TS = (f"SELECT seq, ts FROM ({_OTHER_SELECT}) "
                  f"WHERE ({_TS_VALID}) IS NOT TRUE")
_KNOWN_KEYS = {table: ["t", "seq", "ts", *RECORD_COLUMNS[table]] for table in RECORD_COLUMNS}
_FILE_NOISE = re.compile(r'^.*?in file "[^"]*",? ?(in line \d+: )?', re.S)


@dataclass
class GroupResult:
    stored: int = 0
    malformed: list[Malformed] = field(default_factory=list)
    # Stored without the values their columns cannot hold (`cockpit.store.repair`).
    repaired: list[Malformed] = field(default_factory=list)


@dataclass
class Piece:
    """One host's new lines of one type from one stream segment, stored at seq + offset.

    `data`, when given, is `lines` already joined by newlines (the router has it).
    Every line starts with `{` (the router guarantees it for the lines it accepts).
    """

    host: str
    offset: int
    lines: list[bytes]
    seqs: Sequence[int]
    check_fields: bool = False
    data: bytes | None = None
    result: GroupResult = field(default_factory=GroupResult)

    def joined(self) -> bytes:
        if self.data is None:
            self.data = b"\n".join(self.lines)
        return self.data


@dataclass
class TypeLoad:
    """What loading one type did: rows stored and where the chart levels find them."""

    stored: int = 0
    extras: int = 0  # lines also copied whole into `other` for their unknown fields
    staged: str | None = None  # temp table of exactly the stored rows, when there is one
    first_seq: dict[str, int] = field(default_factory=dict)  # else: host -> lowest new seq


SCRATCH_PREFIX = "cockpit-ingest-"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def remove_orphans(base: Path) -> list[Path]:
    """Remove the scratch dirs in `base` of cockpits that are gone (killed mid-flush, a
    dir on /dev/shm holds up to a flush's lines in memory until the next boot); the
    ones removed. A dir names its process (`cockpit-ingest-PID-…`); one of another user,
    or of a process still running, is left alone."""
    removed = []
    for entry in base.glob(SCRATCH_PREFIX + "*"):
        pid = entry.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        try:
            owned = entry.is_dir() and entry.stat().st_uid == os.getuid()
        except OSError:
            continue
        if not owned or not pid.isdigit() or _pid_running(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


class Scratch:
    """A private directory for the files DuckDB reads; removed on close, and by the next
    cockpit if this one is killed (`remove_orphans`)."""

    def __init__(self, base: Path | None = None) -> None:
        if base is None and os.access("/dev/shm", os.W_OK):
            base = Path("/dev/shm")
        base = base or Path(tempfile.gettempdir())
        remove_orphans(base)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
        self._names = itertools.count()
        # Removed even when the Store is never closed (/dev/shm is memory).
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.dir, True)

    def write(self, data: bytes | list[bytes]) -> str:
        """A new file holding `data` (bytes, or lines to join), newline-terminated."""
        path = self.dir / f"{next(self._names)}.ndjson"
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else b"\n".join(data))
            f.write(b"\n")
        return str(path)

    def close(self) -> None:
        self._finalizer()


def _params(query: str, **values: object) -> dict[str, object]:
    """The subset of `values` that `query` names (DuckDB refuses unused named parameters)."""
    return {k: v for k, v in values.items() if f"${k}" in query}


def _short_error(exc: Exception) -> str:
    text = str(exc).split("\n", 1)[0]
    return _FILE_NOISE.sub("", text) or text


def _tag(index: int, piece: Piece) -> bytes:
    return b'{"@p":%d,"@host":%s,"@off":%d,' % (index, orjson.dumps(piece.host), piece.offset)


def _tagged(index: int, piece: Piece) -> bytes:
    tag = _tag(index, piece)
    return tag + piece.joined()[1:].replace(b"\n{", b"\n" + tag)


def load_type(
    cur: duckdb.DuckDBPyConnection,
    checker: duckdb.DuckDBPyConnection | None,
    scratch: Scratch,
    wire_type: str,
    pieces: list[Piece],
    filings: Sequence[Filing] = (),
) -> TypeLoad:
    """Insert every piece's lines (all of type `wire_type`, all new) inside `cur`'s transaction.

    Each piece's `result` says what became of its lines. With a `checker` (a second
    connection, outside the transaction) bad lines are found and left out first; without
    one, a bad line raises `duckdb.Error`. Rows of the runs in `filings` that arrive late
    are stored under the filed names (`cockpit.store.earlier_runs`).
    """
    table = TABLE_FOR_TYPE.get(wire_type)
    if table is None:
        for piece in pieces:
            _load_other(cur, checker, scratch, wire_type, piece)
        return TypeLoad(stored=sum(p.result.stored for p in pieces))
    tagged = len(pieces) > 1
    if checker is not None:
        _drop_bad_lines(checker, scratch, table, pieces, tagged)
        pieces = [p for p in pieces if p.lines]
        if not pieces:
            return TypeLoad()
    if tagged:
        data = b"\n".join(_tagged(i, piece) for i, piece in enumerate(pieces))
    else:
        data = pieces[0].joined()
    path = scratch.write(data)
    load = TypeLoad()
    late = late_rows_job(filings, table, *_host_seq(tagged))
    job_sql, late_params = late if late is not None else (None, {})
    try:
        if tagged and table in LEVEL_SERIES:
            query = _STAGES[table] if job_sql is None else _stage_sql(table, job_sql)
            cur.execute(query, {"path": path, **late_params})
            row = cur.execute(_UNSTAGES[table]).fetchone()
            load.staged = staging_table(table)
        else:
            query = (_INSERTS[(table, tagged)] if job_sql is None
                     else _insert_sql(table, tagged, job_sql))
            row = cur.execute(query, _params(query, path=path, host=pieces[0].host,
                                             offset=pieces[0].offset,
                                             **late_params)).fetchone()
        load.stored = int(row[0]) if row else 0
        missing: dict[tuple[int, int], str] = {}  # (piece, seq) -> why its row has no ts
        if load.stored < sum(len(p.lines) for p in pieces):
            rows = cur.execute(_NULL_TS[(table, tagged)], {"path": path}).fetchall()
            missing = {(int(i), int(seq)): _why_invalid(wire_type, int(seq), ts, step)
                       for i, seq, ts, step in rows}
        for i, piece in enumerate(pieces):
            no_ts = [
                Malformed(missing[(i, seq)], line)
                for seq, line in zip(piece.seqs, piece.lines, strict=True)
                if (i, seq) in missing
            ] if missing else []
            piece.result.malformed += no_ts
            piece.result.stored = len(piece.lines) - len(no_ts)
        load.extras = _insert_extras(cur, path, table, wire_type, pieces, tagged)
    finally:
        os.unlink(path)
    if load.staged is None:
        load.first_seq = {pieces[0].host: pieces[0].offset + pieces[0].seqs[0]}
    return load


def _insert_extras(
    cur: duckdb.DuckDBPyConnection, path: str, table: str, wire_type: str,
    pieces: list[Piece], tagged: bool,
) -> int:
    """Copy the lines of checked pieces that carry fields `table` does not know into `other`.

    In a tagged file the tag is cut off again (by its length in characters), so `raw`
    is the line exactly as the agent sent it.
    """
    checked = [i for i, p in enumerate(pieces) if p.check_fields and p.result.stored]
    if not checked:
        return 0
    label = f"{wire_type}+extra"
    if not tagged:
        row = cur.execute(_EXTRA_INSERT, {
            "host": pieces[0].host, "offset": pieces[0].offset, "path": path,
            "label": label, "known": _KNOWN_KEYS[table],
        }).fetchone()
    else:
        row = cur.execute(_TAGGED_EXTRA_INSERT, {
            "path": path, "label": label, "known": [*_TAG_TYPES, *_KNOWN_KEYS[table]],
            "checked": checked,
            "cut": [len(_tag(i, p).decode()) for i, p in enumerate(pieces)],
        }).fetchone()
    return int(row[0]) if row else 0


def _load_other(
    cur: duckdb.DuckDBPyConnection,
    checker: duckdb.DuckDBPyConnection | None,
    scratch: Scratch,
    wire_type: str,
    piece: Piece,
) -> None:
    """Store a piece of a type this cockpit does not know, whole, in `other`."""
    if checker is not None:
        _drop_bad_lines(checker, scratch, None, [piece], False)
        if not piece.lines:
            return
    path = scratch.write(piece.joined())
    try:
        params = {"host": piece.host, "offset": piece.offset, "path": path}
        row = cur.execute(_OTHER_INSERT, params).fetchone()
        piece.result.stored = int(row[0]) if row else 0
        if piece.result.stored < len(piece.lines):
            rows = cur.execute(_OTHER_NULL_TS, params).fetchall()
            missing = {int(seq) - piece.offset: _why_invalid(wire_type, int(seq) - piece.offset,
                                                             ts, None)
                       for seq, ts in rows}
            piece.result.malformed += [
                Malformed(missing[seq], line)
                for seq, line in zip(piece.seqs, piece.lines, strict=True)
                if seq in missing
            ]
    finally:
        os.unlink(path)


def _drop_bad_lines(
    checker: duckdb.DuckDBPyConnection,
    scratch: Scratch,
    table: str | None,
    pieces: list[Piece],
    tagged: bool,
) -> None:
    """Move the lines the strict reader cannot type from the pieces to their results."""
    candidates: list[bytes] = []
    where: list[tuple[int, int]] = []  # (piece, line) of each candidate
    bad: dict[tuple[int, int], str] = {}
    for i, piece in enumerate(pieces):
        tag = _tag(i, piece) if tagged else b""
        for j, line in enumerate(piece.lines):
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                bad[(i, j)] = f"not JSON: {exc}"
                continue
            if not isinstance(record, dict):
                bad[(i, j)] = f"not a JSON object but {type(record).__name__}"
                continue
            candidates.append(tag + line[1:] if tagged else line)
            where.append((i, j))
    query = _OTHER_CHECK if table is None else _CHECKS[(table, tagged)]
    rejected: dict[int, str] = {}
    _bisect(checker, scratch, query, candidates, list(range(len(candidates))), rejected)
    label = table or "record"
    for k, error in rejected.items():
        bad[where[k]] = f"{label} record does not fit its types: {error}"
    for (i, j), error in list(bad.items()):
        piece = pieces[i]
        fixed = repair(piece.lines[j], table)
        if fixed is None:
            continue
        line, dropped = fixed
        refused: dict[int, str] = {}
        candidate = _tag(i, piece) + line[1:] if tagged else line
        _bisect(checker, scratch, query, [candidate], [0], refused)
        if refused:
            continue
        piece.result.repaired.append(Malformed(
            f"{label} record stored without {', '.join(dropped)} (a value its column "
            f"cannot hold; {error})", piece.lines[j]))
        piece.lines[j] = line
        piece.data = None
        del bad[(i, j)]
    for i, piece in enumerate(pieces):
        drop = sorted(j for (pi, j) in bad if pi == i)
        if not drop:
            continue
        piece.result.malformed += [Malformed(bad[(i, j)], piece.lines[j]) for j in drop]
        gone = set(drop)
        keep = [j for j in range(len(piece.lines)) if j not in gone]
        piece.seqs = [piece.seqs[j] for j in keep]
        piece.lines = [piece.lines[j] for j in keep]
        piece.data = None


def _bisect(
    checker: duckdb.DuckDBPyConnection,
    scratch: Scratch,
    query: str,
    lines: list[bytes],
    indices: list[int],
    rejected: dict[int, str],
) -> None:
    """Record in `rejected` every index whose line alone fails the strict reader."""
    if not indices:
        return
    path = scratch.write([lines[i] for i in indices])
    try:
        checker.execute(query, _params(query, path=path, host="", offset=0)).fetchall()
        return
    except duckdb.Error as exc:
        if len(indices) == 1:
            rejected[indices[0]] = _short_error(exc)
            return
    finally:
        os.unlink(path)
    half = len(indices) // 2
    _bisect(checker, scratch, query, lines, indices[:half], rejected)
    _bisect(checker, scratch, query, lines, indices[half:], rejected)
