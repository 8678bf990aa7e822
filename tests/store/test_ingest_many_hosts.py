"""One flush holding many hosts: each record type is loaded once for all of them.

The tagged load (host and seq offset carried by each line) must keep every per-host
guarantee of a one-host ingest: dedupe by each host's own mark, straddling chunks,
malformed lines charged to their own host, journal resets, unknown fields kept whole,
and chart levels identical to those of one-host flushes.
"""

from __future__ import annotations

import json

import pytest

from agent.wire.protocol import encode
from cockpit.store import Store
from tests.store.wire import TS0, count, gpu, header, train, trains


def _rows(store: Store, sql: str) -> list[tuple]:
    with store.cursor() as cur:
        return cur.execute(sql).fetchall()


def test_each_host_is_deduplicated_by_its_own_mark(store: Store) -> None:
    store.ingest_many([("a", trains(1, 10)), ("b", trains(1, 3))])
    result = store.ingest_many([
        ("a", trains(5, 12)),  # straddles a's mark (10)
        ("b", trains(1, 3)),  # wholly resent
        ("c", header() + trains(1, 4) + gpu(5)),
    ])
    assert (result.stored, result.duplicates) == (2 + 5, 6 + 3)
    assert result.by_host == {"a": 2, "b": 0, "c": 5}
    assert [store.high_water(h) for h in "abc"] == [12, 3, 5]
    got = _rows(store, "SELECT host, seq FROM train ORDER BY host, seq")
    assert got == [*(("a", s) for s in range(1, 13)), *(("b", s) for s in range(1, 4)),
                   *(("c", s) for s in range(1, 5))]
    assert _rows(store, "SELECT host, seq FROM gpu") == [("c", 5)]


def test_a_bad_line_of_one_host_is_charged_to_it_and_the_rest_stored(store: Store) -> None:
    bad = b'{"t":"train","seq":3,"ts":1,"job":"j1","step":"three"}\n'
    result = store.ingest_many([
        ("a", header() + trains(1, 2) + bad + trains(4, 5)),
        ("b", header() + trains(1, 5)),
    ])
    assert (result.stored, result.malformed) == (9, 1)
    hosts = {row.host: row for row in store.hosts()}
    assert (hosts["a"].malformed, hosts["b"].malformed) == (1, 0)
    assert "does not fit its types" in (hosts["a"].last_error or "")
    assert _rows(store, "SELECT host, sample FROM wire_errors") == [("a", bad.decode().strip())]
    assert count(store, "train", "host = 'a'") == 4
    assert count(store, "train", "host = 'b'") == 5


def test_a_line_carrying_the_load_tag_is_rejected_not_filed_under_another_host(
    store: Store,
) -> None:
    forged = encode("train", 2, {"job": "j1", "rank": 0, "step": 2, "@host": "b"}, ts=TS0)
    result = store.ingest_many([("a", header() + train(1, 1) + forged),
                                ("b", header() + train(1, 1))])
    assert (result.stored, result.malformed) == (2, 1)
    assert _rows(store, "SELECT host, seq FROM train ORDER BY host") == [("a", 1), ("b", 1)]
    assert store.hosts()[0].malformed == 1


def test_a_journal_reset_in_a_shared_flush_rekeys_only_its_host(store: Store) -> None:
    store.ingest_many([("a", header("A1") + trains(1, 5)), ("b", header("B1") + trains(1, 5))])
    # a's stream reconnects to a new journal asking from the old mark: A2's first two
    # records are not sent, so a (only) must stream again from 0.
    result = store.ingest_many([
        ("a", header("A1", start=5) + trains(6, 7) + header("A2", start=7, head=2)),
        ("b", header("B1", start=5) + trains(6, 7)),
    ])
    assert result.journal_resets == ("a",)
    assert (store.high_water("a"), store.high_water("b")) == (0, 7)
    again = store.ingest_many([("a", header("A2", start=0, head=2) + trains(1, 2))])
    assert again.journal_resets == ()
    assert _rows(store, "SELECT seq FROM train WHERE host = 'a' ORDER BY seq") == [
        (s,) for s in range(1, 10)]
    assert _rows(store, "SELECT seq FROM train WHERE host = 'b' ORDER BY seq") == [
        (s,) for s in range(1, 8)]
    assert (store.high_water("a"), store.high_water("b")) == (2, 7)


def test_lines_without_a_timestamp_are_found_per_host(store: Store) -> None:
    no_ts = b'{"t":"gpu","seq":3,"gpu":0,"util":1.0}\n'
    result = store.ingest_many([("a", header() + gpu(1) + gpu(2) + no_ts),
                                ("b", header() + gpu(1) + gpu(2) + gpu(3))])
    assert (result.stored, result.malformed) == (5, 1)
    hosts = {row.host: row for row in store.hosts()}
    assert (hosts["a"].malformed, hosts["b"].malformed) == (1, 0)
    assert "no numeric `ts`" in (hosts["a"].last_error or "")


def test_unknown_fields_are_kept_as_the_line_that_was_sent(store: Store) -> None:
    # No stream header: fields are checked. The host name needs JSON escaping.
    odd = 'b "quoted" ü'
    line_a = encode("gpu", 7, {"gpu": 0, "util": 1.0, "fan_rpm": 3000}, ts=TS0)
    line_b = encode("gpu", 9, {"gpu": 1, "util": 2.0, "volts": 1.1}, ts=TS0)
    store.ingest_many([("a", gpu(6) + line_a), (odd, line_b + gpu(10))])
    rows = _rows(store, "SELECT host, seq, t, raw FROM other ORDER BY seq")
    assert [(h, s, t) for h, s, t, _ in rows] == [("a", 7, "gpu+extra"), (odd, 9, "gpu+extra")]
    assert [raw.encode() + b"\n" for *_, raw in rows] == [line_a, line_b]
    assert json.loads(rows[1][3])["volts"] == 1.1
    assert count(store, "gpu") == 4


def test_a_type_sharing_a_prefix_with_a_known_one_is_routed_by_its_full_name(
    store: Store,
) -> None:
    future = encode("gpux", 2, {"watts": 1}, ts=TS0)
    result = store.ingest("a", header() + gpu(1) + future + gpu(3))
    assert result.by_type == {"gpu": 2, "gpux": 1}
    assert _rows(store, "SELECT seq, t FROM other") == [(2, "gpux")]


@pytest.mark.slow
def test_levels_from_a_shared_flush_equal_levels_from_one_host_flushes(tmp_path) -> None:
    def stream(host_index: int) -> bytes:
        return b"".join(
            gpu(seq, index=seq % 2, util=float((seq * 7 + host_index) % 100),
                ts=TS0 + seq * 10.0)
            for seq in range(1, 400)
        ) + b"".join(train(400 + s, s, loss=float(s % 13), rank=host_index, ts=TS0 + s)
                     for s in range(1, 200))

    tables = ("gpu_levels", "gpu_levels_open", "train_levels", "train_levels_open", "gpu",
              "train")
    with (Store(tmp_path / "shared.duckdb", fold_interval=0) as shared,
          Store(tmp_path / "one.duckdb", fold_interval=0) as one):
        for part in range(3):
            chunks = []
            for h in range(3):
                lines = stream(h).splitlines(keepends=True)
                chunks.append((f"h{h}", b"".join(lines[part * 200:(part + 1) * 200])))
            shared.ingest_many(chunks)
            for host, chunk in chunks:
                one.ingest(host, chunk)
        for table in tables:
            order = "ALL" if "_levels" in table else "host, seq"
            sql = f'SELECT * FROM "{table}" ORDER BY {order}'
            assert _rows(shared, sql) == _rows(one, sql), table
        assert count(shared, "gpu_levels", "level = 0") > 3
