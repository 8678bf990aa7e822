"""Property tests of the wire decoder and ingest router (issue 25): whatever bytes a host
sends, each line is stored once, counted a duplicate, or counted malformed; nothing
raises, no flush fails, and a clean host in the same flush is stored whole."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.wire.protocol import encode
from cockpit.ingest.bounds import SEQ_MAX
from cockpit.ingest.route import pregroup, route_chunk, split_chunk
from cockpit.store import Store
from cockpit.store.schema import RECORD_COLUMNS
from cockpit.store.writer import StoreWriter
from tests.store.wire import TS0, trains

_SEQ = st.one_of(st.integers(1, 40), st.integers(1, 40), st.integers(-2, 0),
                 st.integers(SEQ_MAX - 1, SEQ_MAX + 1), st.just(10**20))
_TS = st.one_of(st.floats(TS0, TS0 + 1e6), st.floats(TS0, TS0 + 1e6),
                st.floats(allow_nan=False), st.just(None), st.text(max_size=3))
_STEP = st.one_of(st.integers(0, 100), st.integers(-(2**70), 2**70), st.floats(),
                  st.text(max_size=3))


@st.composite
def _record(draw) -> tuple[bytes, bool]:
    """A line and whether it is a stream header."""
    kind = draw(st.sampled_from(["train", "gpu", "event", "mystery", "header",
                                 "reordered", "garbage"]))
    seq = draw(_SEQ)
    if kind == "header":
        fields = {name: draw(st.one_of(_SEQ, st.just(0), st.text(max_size=2)))
                  for name in ("from", "first", "head")
                  if draw(st.booleans())}
        fields["journal_id"] = draw(st.sampled_from(["J1", "J1", "J2", "", "x" * 300]))
        return encode("stream", 0, {"protocol": 1, **fields}, ts=TS0), True
    if kind == "garbage":
        line = draw(st.binary(min_size=1, max_size=40).filter(
            lambda b: b"\n" not in b and b"stream" not in b and not b.isspace()))
        return line, False
    if kind == "reordered":  # valid JSON without the canonical prefix
        return b'{"ts":%s,"seq":%d,"t":"%s","job":"j1","step":%s}' % (
            _json(draw(_TS)), seq, draw(st.sampled_from([b"train", b"log"])),
            _json(draw(_STEP))), False
    fields: dict[str, object] = {"job": "j1", "rank": 0}
    if kind in ("train", "event"):
        fields["step"] = draw(_STEP)
    if kind == "gpu":
        fields.update(gpu=draw(st.integers(0, 7)), util=draw(st.floats(allow_nan=False)))
    if kind == "event":
        fields.update(kind="checkpoint_saved", msg=draw(st.text(max_size=8)))
    line = encode(kind, seq, fields, ts=TS0).rstrip(b"\n")
    return line.replace(b'"ts":%s' % repr(TS0).encode(), b'"ts":' + _json(draw(_TS)), 1), False


def _json(value: object) -> bytes:
    """JSON for any drawn value, an integer past 64 bits included (orjson refuses it)."""
    if isinstance(value, int) and abs(value) >= 2**63:
        return str(value).encode()
    return orjson.dumps(value)  # (an infinite float becomes null)


_LINES = st.lists(_record(), min_size=1, max_size=25)
_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _chunk(lines: list[tuple[bytes, bool]]) -> bytes:
    return b"".join(line + b"\n" for line, _ in lines)


@pytest.mark.slow
@settings(max_examples=200, **_FUZZ)
@given(_LINES, st.integers(0, 45))
def test_the_router_accepts_each_seq_once_in_order_within_bounds(lines, mark: int) -> None:
    chunk = _chunk(lines)
    pregroup(chunk)
    for split in (route_chunk, split_chunk):
        for segment in split(chunk, mark, lambda header, running: running):
            accepted = sorted(s for seqs in segment.seqs.values() for s in seqs)
            assert len(set(accepted)) == len(accepted)
            assert all(0 < s <= SEQ_MAX for s in accepted)
            floor = segment.start_mark if segment.header is not None else mark
            assert all(s > floor for s in accepted)


def _stored_rows(store: Store, host: str) -> list[int]:
    seqs: list[int] = []
    with store.cursor() as cur:
        for table in RECORD_COLUMNS:
            seqs += [int(r[0]) for r in cur.execute(
                f'SELECT seq FROM "{table}" WHERE host = $h', {"h": host}).fetchall()]
        seqs += [int(r[0]) for r in cur.execute(
            "SELECT seq FROM other WHERE host = $h AND t NOT LIKE '%+extra'",
            {"h": host}).fetchall()]
    return seqs


@pytest.mark.slow
@settings(max_examples=15, **_FUZZ)
@given(_LINES, st.lists(st.integers(1, 24), max_size=3), st.booleans())
def test_any_bytes_are_stored_or_counted_and_never_fail_a_flush(
        lines, cuts: list[int], through_writer: bool) -> None:
    chunk = _chunk(lines)
    data_lines = sum(1 for _, is_header in lines if not is_header)
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "f.duckdb") as store:
        if through_writer:  # grouped ahead on arrival, in pieces cut at line ends
            writer = StoreWriter(store, interval=60.0, on_error=_raise)
            parts = chunk.split(b"\n")
            bounds = sorted({min(c, len(parts) - 1) for c in cuts} | {0, len(parts) - 1})
            for a, b in itertools.pairwise(bounds):
                writer.put("h", b"".join(p + b"\n" for p in parts[a:b]))
            writer.put("clean", trains(1, 5))
            result = writer.flush()
        else:
            result = store.ingest_many([("h", chunk), ("clean", trains(1, 5))])
        assert result is not None and result.failed == ()
        assert store.high_water("clean") == 5
        stored = _stored_rows(store, "h")
        assert len(stored) == len(set(stored)), "a seq stored twice"
        assert len(stored) == result.by_host.get("h", 0)
        assert len(stored) + result.duplicates + result.malformed == data_lines
        assert 0 <= store.high_water("h") <= SEQ_MAX
        store.fold_levels()  # the chart folds take whatever was stored


def _raise(exc: Exception) -> None:
    raise AssertionError(f"the writer reported a failure: {exc!r}")
