"""Bulk-load one host's lines of one record type into their table.

Measured here (realistic 450-byte gpu/train/host lines, 20 k-line chunks): DuckDB's
`read_json` over a file runs at ~1 M lines/s and the typed INSERT from it at ~0.3-0.4 M
lines/s, while the same reader over an `io.BytesIO` relation spends as long registering
the buffer as inserting (~0.18 M lines/s) and orjson → Arrow → INSERT reaches ~0.2 M. So
each group is written to a private scratch file (on /dev/shm when there is one) and read
back by SQL with explicit column types.

A line that does not convert to its table's types makes the strict reader fail, and in
DuckDB a failed statement poisons the whole transaction. Loading is therefore
optimistic: the fast path assumes clean data; the caller rolls back and retries with
`careful=True`, where every group is first checked on a separate connection and the bad
lines are isolated (orjson for lines that are not JSON objects, then bisection with the
same strict reader, so a line is malformed exactly when DuckDB cannot type it).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson

from cockpit.ingest.route import Malformed
from cockpit.store.schema import RECORD_COLUMNS, TABLE_FOR_TYPE

_KEY_TYPES = {"seq": "BIGINT", "ts": "DOUBLE"}


def _columns_literal(table: str) -> str:
    cols = {**_KEY_TYPES, **RECORD_COLUMNS[table]}
    return "{" + ", ".join(f"'{name}': '{typ}'" for name, typ in cols.items()) + "}"


def _reader(table: str) -> str:
    return f"read_json($path, columns={_columns_literal(table)}, format='newline_delimited')"


def _insert_sql(table: str) -> str:
    names = ", ".join(f'"{c}"' for c in RECORD_COLUMNS[table])
    return (
        f'INSERT INTO "{table}" (host, seq, ts, {names}) '
        f"SELECT $host, seq + $offset, ts, {names} FROM {_reader(table)} "
        "WHERE ts IS NOT NULL"
    )


_OTHER_SELECT = (
    "SELECT $host AS host, (json->>'seq')::BIGINT + $offset AS seq, "
    "TRY_CAST(json->>'ts' AS DOUBLE) AS ts, json->>'t' AS t, json AS raw "
    "FROM read_ndjson_objects($path)"
)
_OTHER_INSERT = f"INSERT INTO other SELECT * FROM ({_OTHER_SELECT}) WHERE ts IS NOT NULL"
_EXTRA_INSERT = (
    "INSERT INTO other SELECT $host, (json->>'seq')::BIGINT + $offset, "
    "TRY_CAST(json->>'ts' AS DOUBLE), $label, json FROM read_ndjson_objects($path) "
    "WHERE NOT list_has_all($known, json_keys(json)) "
    "AND TRY_CAST(json->>'ts' AS DOUBLE) IS NOT NULL"
)
_INSERTS = {table: _insert_sql(table) for table in RECORD_COLUMNS}


def _check_sql(table: str) -> str:
    # Counting every column makes the reader convert every value (count(*) would not).
    counts = ", ".join(f'count("{c}")' for c in ["seq", "ts", *RECORD_COLUMNS[table]])
    return f"SELECT {counts} FROM {_reader(table)}"


_CHECKS = {table: _check_sql(table) for table in RECORD_COLUMNS}
_NULL_TS = {table: f"SELECT seq FROM {_reader(table)} WHERE ts IS NULL" for table in RECORD_COLUMNS}
_OTHER_CHECK = f"SELECT count(seq), count(ts), count(t), count(raw) FROM ({_OTHER_SELECT})"
_OTHER_NULL_TS = f"SELECT (json->>'seq')::BIGINT FROM ({_OTHER_SELECT}) WHERE ts IS NULL"
_KNOWN_KEYS = {table: ["t", "seq", "ts", *RECORD_COLUMNS[table]] for table in RECORD_COLUMNS}
_FILE_NOISE = re.compile(r'^.*?in file "[^"]*",? ?(in line \d+: )?', re.S)


@dataclass
class GroupResult:
    stored: int = 0
    extras: int = 0
    malformed: list[Malformed] = field(default_factory=list)


class Scratch:
    """A private directory for the files DuckDB reads; removed on close."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.dir = Path(tempfile.mkdtemp(prefix="cockpit-ingest-", dir=base))
        self._names = itertools.count()
        # Removed even when the Store is never closed (/dev/shm is memory).
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.dir, True)

    def write(self, lines: list[bytes]) -> str:
        path = self.dir / f"{next(self._names)}.ndjson"
        with open(path, "wb") as f:
            f.write(b"\n".join(lines))
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


def load_group(
    cur: duckdb.DuckDBPyConnection,
    checker: duckdb.DuckDBPyConnection | None,
    scratch: Scratch,
    host: str,
    wire_type: str,
    lines: list[bytes],
    seqs: Sequence[int],
    offset: int,
    check_fields: bool,
) -> GroupResult:
    """Insert `lines` (all of type `wire_type`, all new) for `host` inside `cur`'s transaction.

    With a `checker` (a second connection, outside the transaction) bad lines are found
    and left out first; without one, a bad line raises `duckdb.Error`.
    """
    table = TABLE_FOR_TYPE.get(wire_type)
    result = GroupResult()
    if checker is not None:
        lines, seqs, result.malformed = _drop_bad_lines(checker, scratch, table, lines, seqs)
        if not lines:
            return result
    path = scratch.write(lines)
    try:
        params = {"host": host, "offset": offset, "path": path}
        insert = _OTHER_INSERT if table is None else _INSERTS[table]
        stored = cur.execute(insert, params).fetchone()
        result.stored = int(stored[0]) if stored else 0
        if result.stored < len(lines):
            result.malformed += _missing_ts(cur, table, path, seqs, lines, wire_type)
        if table is not None and check_fields:
            extra = cur.execute(
                _EXTRA_INSERT,
                {**params, "label": f"{wire_type}+extra", "known": _KNOWN_KEYS[table]},
            ).fetchone()
            result.extras = int(extra[0]) if extra else 0
    finally:
        os.unlink(path)
    return result


def _missing_ts(
    cur: duckdb.DuckDBPyConnection,
    table: str | None,
    path: str,
    seqs: Sequence[int],
    lines: list[bytes],
    wire_type: str,
) -> list[Malformed]:
    query = _OTHER_NULL_TS if table is None else _NULL_TS[table]
    rows = cur.execute(query, _params(query, path=path, host="", offset=0)).fetchall()
    missing = {int(row[0]) for row in rows}
    return [
        Malformed(f"{wire_type} record seq {seq} has no numeric `ts`", line)
        for seq, line in zip(seqs, lines, strict=True)
        if seq in missing
    ]


def _drop_bad_lines(
    checker: duckdb.DuckDBPyConnection,
    scratch: Scratch,
    table: str | None,
    lines: list[bytes],
    seqs: Sequence[int],
) -> tuple[list[bytes], Sequence[int], list[Malformed]]:
    bad: list[Malformed] = []
    keep: list[int] = []
    for i, line in enumerate(lines):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            bad.append(Malformed(f"not JSON: {exc}", line))
            continue
        if not isinstance(record, dict):
            bad.append(Malformed(f"not a JSON object but {type(record).__name__}", line))
            continue
        keep.append(i)
    query = _OTHER_CHECK if table is None else _CHECKS[table]
    rejected: dict[int, str] = {}
    _bisect(checker, scratch, query, lines, keep, rejected)
    label = table or "record"
    for i in sorted(rejected):
        bad.append(Malformed(f"{label} record does not fit its types: {rejected[i]}", lines[i]))
    good = [i for i in keep if i not in rejected]
    return [lines[i] for i in good], [seqs[i] for i in good], bad


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
