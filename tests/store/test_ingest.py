"""Store.ingest: every record type, dedupe on (host, seq), malformed and unknown input."""

from __future__ import annotations

import json

from agent.wire.protocol import encode
from cockpit.ingest.route import pregroup
from cockpit.store import Store
from cockpit.store.loader import insert_statement
from tests.store.wire import TS0, count, gpu, header, train, trains

EVERY_TYPE = {
    "hello": {"agent_version": "1", "protocol": 1, "hostname": "h", "boot_id": "b", "pid": 9,
              "python": "3.11", "platform": "Linux", "cpu_count": 8, "mem_total": 1 << 30,
              "gpu_source": "sim", "gpu_state": "simulated", "driver": None,
              "gpus": [{"index": 0, "uuid": "u", "name": "SIM", "mem_total": 1,
                        "simulated": True}],
              "env": {"python": "3.11"}, "psutil": True},
    "gpu": {"gpu": 0, "uuid": "u", "sim": True, "util": 99.5, "mem_used": 5, "temp": 70.0,
            "throttle": 4, "remap_pending": False, "procs": [{"pid": 1, "mem": 2, "rank": 0}]},
    "host": {"cpu": 12.5, "load1": 1.0, "mem_used": 10, "disk_path": "/", "net_rx": 1.0,
             "procs": []},
    "run": {"job": "j1", "rank": 0, "total_steps": 100, "stages": ["a", "b"],
            "config": {"lr": 0.1}, "seed": 1, "flops_per_step": 1e12, "world_size": 2,
            "tags": ["x"]},
    "train": {"job": "j1", "rank": 0, "step": 3, "loss": None, "nonfinite": "nan",
              "step_time": 0.2, "extra": {"acc": 0.9}},
    "eval": {"job": "j1", "rank": 0, "step": 3, "loss": 1.5, "metrics": {"acc": 0.8}},
    "event": {"kind": "checkpoint_saved", "job": "j1", "rank": None, "step": 3,
              "msg": "saved", "data": {"path": "/ckpt", "bytes": 10}},
    "log": {"job": "j1", "rank": 1, "stream": "stderr", "line": "warning: x"},
    "alert": {"kind": "resource", "severity": "warning", "code": "thermal_throttle",
              "where": {"host": "h", "gpu": 0}, "what": "hot", "hint": "cool it"},
}


def test_every_record_type_lands_in_its_typed_table(store: Store) -> None:
    lines = [encode(t, i + 1, fields, ts=TS0 + i) for i, (t, fields) in
             enumerate(EVERY_TYPE.items())]
    result = store.ingest("h1", header() + b"".join(lines))
    assert result.stored == len(EVERY_TYPE)
    assert result.by_type == {t: 1 for t in EVERY_TYPE}
    assert (result.duplicates, result.malformed, result.max_seq) == (0, 0, len(EVERY_TYPE))
    with store.cursor() as cur:
        assert cur.execute("SELECT util, throttle, procs->>'$[0].rank' FROM gpu").fetchall() == [
            (99.5, 4, "0")]
        assert cur.execute("SELECT cpu, disk_path FROM host_sample").fetchall() == [(12.5, "/")]
        assert cur.execute("SELECT stages, config->>'lr' FROM run").fetchall() == [
            ('["a","b"]', "0.1")]
        assert cur.execute("SELECT loss, nonfinite, extra->>'acc' FROM train").fetchall() == [
            (None, "nan", "0.9")]
        assert cur.execute("SELECT kind, data->>'path', seq, ts FROM event").fetchall() == [
            ("checkpoint_saved", "/ckpt", 7, TS0 + 6)]
        assert cur.execute("SELECT \"where\"->>'gpu' FROM alert").fetchall() == [("0",)]
        assert cur.execute("SELECT gpus->>'$[0].name', psutil FROM hello").fetchall() == [
            ("SIM", True)]
    assert count(store, "other") == 0


def test_resent_overlapping_chunks_are_stored_once(store: Store) -> None:
    first = store.ingest("h1", trains(1, 10))
    again = store.ingest("h1", trains(5, 15))
    assert (first.stored, again.stored, again.duplicates) == (10, 5, 6)
    assert store.ingest("h1", trains(1, 15)).duplicates == 15
    assert count(store, "train") == 15
    with store.cursor() as cur:
        seqs = [r[0] for r in cur.execute("SELECT seq FROM train ORDER BY seq").fetchall()]
    assert seqs == list(range(1, 16))


def test_a_chunk_straddling_the_mark_keeps_only_the_new_part(store: Store) -> None:
    store.ingest("h1", trains(1, 100))
    result = store.ingest("h1", gpu(99) + gpu(100) + trains(101, 103) + gpu(104))
    assert (result.stored, result.duplicates, result.max_seq) == (4, 2, 104)
    assert result.by_type == {"train": 3, "gpu": 1}
    assert store.high_water("h1") == 104


def test_hosts_are_deduplicated_independently(store: Store) -> None:
    store.ingest("h1", trains(1, 5))
    result = store.ingest("h2", trains(1, 5))
    assert result.stored == 5
    assert (store.high_water("h1"), store.high_water("h2")) == (5, 5)


def test_malformed_lines_are_counted_sampled_and_the_rest_stored(store: Store) -> None:
    bad = [
        b'{"t":"gpu","seq":4,"ts":1,"x":' + b"[" * 3000 + b"]" * 3000 + b"}",
        b"this is not json",
        b'{"t":"gpu","seq":"seven","ts":1}',
        b'{"seq":8,"ts":1}',
        b"[1,2,3]",
        b'{"t":"gpu","seq":9,"ts":1,"gpu":"first"}',
        b'{"t":"train","seq":10,"job":"j1"}',
        b'{"t":"gpu","seq":11,"ts":1,"util":',
        b"[" * 3000,  # past orjson's depth and then Python's: once raised out of the flush
    ]
    chunk = trains(1, 3) + b"\n".join(bad) + b"\n" + trains(12, 14)
    result = store.ingest("h1", header() + chunk)
    assert result.malformed == len(bad)
    assert result.stored == 6
    assert count(store, "train") == 6
    (row,) = store.hosts()
    assert row.malformed == len(bad)
    with store.cursor() as cur:
        errors = [r[0] for r in cur.execute("SELECT error FROM wire_errors").fetchall()]
    assert len(errors) == len(bad)
    joined = "\n".join(errors)
    for phrase in ("not JSON", "no integer `seq`", "no record type", "not a JSON object",
                   "does not fit its types", "no numeric `ts`"):
        assert phrase in joined, phrase


def test_wire_error_samples_are_bounded_but_all_counted(store: Store) -> None:
    from cockpit.store.database import WIRE_ERROR_SAMPLES_PER_HOST

    junk = b"".join(b"junk %d\n" % i for i in range(WIRE_ERROR_SAMPLES_PER_HOST + 20))
    store.ingest("h1", junk)
    store.ingest("h1", junk)
    assert store.hosts()[0].malformed == 2 * (WIRE_ERROR_SAMPLES_PER_HOST + 20)
    assert count(store, "wire_errors") == WIRE_ERROR_SAMPLES_PER_HOST


def test_unknown_types_and_fields_are_kept(store: Store) -> None:
    future = encode("power_cap", 2, {"watts": 300, "gpu": 1}, ts=TS0)
    extra = encode("train", 3, {"job": "j1", "rank": 0, "step": 1, "loss": 2.0,
                                "new_metric": 7}, ts=TS0)
    result = store.ingest("h1", header(protocol=2) + train(1, 0) + future + extra)
    assert result.stored == 3
    assert count(store, "train") == 2
    with store.cursor() as cur:
        rows = cur.execute("SELECT seq, t, raw FROM other ORDER BY seq").fetchall()
    assert [(seq, t) for seq, t, _ in rows] == [(2, "power_cap"), (3, "train+extra")]
    assert json.loads(rows[0][2])["watts"] == 300
    assert json.loads(rows[1][2])["new_metric"] == 7


def test_fields_are_checked_always_when_asked(tmp_store_path) -> None:
    extra = encode("gpu", 1, {"gpu": 0, "util": 1.0, "fan_rpm": 3000}, ts=TS0)
    with Store(tmp_store_path, check_fields="always") as store:
        store.ingest("h1", header(protocol=1) + extra)
        assert count(store, "other", "t = 'gpu+extra'") == 1


def test_a_journal_reset_rekeys_the_host(store: Store) -> None:
    store.ingest("h1", header("J1") + trains(1, 50))
    reset = store.ingest("h1", header("J2", start=50, first=1, head=3))
    assert reset.journal_resets == ("h1",)
    assert store.high_water("h1") == 0
    after = store.ingest("h1", header("J2", start=0, first=1, head=3) + trains(1, 3))
    assert after.stored == 3 and after.journal_resets == ()
    assert store.high_water("h1") == 3
    (row,) = store.hosts()
    assert (row.journal_id, row.seq_offset) == ("J2", 50)
    assert "journal reset" in (row.last_error or "")
    with store.cursor() as cur:
        seqs = [r[0] for r in cur.execute("SELECT seq FROM train ORDER BY seq").fetchall()]
    assert seqs == [*range(1, 51), 51, 52, 53]


def test_a_reset_in_the_middle_of_a_chunk_applies_to_the_lines_after_it(store: Store) -> None:
    # What an agent's stream sends when the journal is replaced under it: a header that
    # starts the new journal from its first record, then that journal. Nothing was
    # skipped, so the stream need not start again.
    result = store.ingest("h1", header("J1") + trains(1, 4) + header("J2") + trains(1, 2))
    assert result.stored == 6
    assert result.journal_resets == ()
    assert store.high_water("h1") == 2
    with store.cursor() as cur:
        seqs = [r[0] for r in cur.execute("SELECT seq FROM train ORDER BY seq").fetchall()]
    assert seqs == [1, 2, 3, 4, 5, 6]


def test_records_dropped_by_agent_retention_are_counted_as_lost(store: Store) -> None:
    store.ingest("h1", header("J1") + trains(1, 10))
    store.ingest("h1", header("J1", start=10, first=25, head=30) + trains(25, 30))
    (row,) = store.hosts()
    assert row.lost == 14
    assert store.high_water("h1") == 30


def test_a_reconnect_resending_uncommitted_lines_in_one_batch_stores_them_once(
    store: Store,
) -> None:
    batch = [("h1", header("J1") + trains(1, 10)), ("h1", header("J1", start=0) + trains(1, 12))]
    result = store.ingest_many(batch)
    assert (result.stored, result.duplicates) == (12, 10)
    assert count(store, "train") == 12


def test_pregrouped_chunks_are_stored_as_routed_ones_resends_included(store: Store) -> None:
    """What a writer's callers group ahead of the flush must store exactly what the
    flush would route itself: new lines once, a reconnect's resend below the mark not at
    all (a resend comes after a stream header, which is never grouped ahead)."""
    chunks = [header("J1") + trains(1, 10), gpu(11) + trains(12, 20),
              header("J1", start=4) + trains(5, 25), trains(26, 30)]
    assert [pregroup(c) is not None for c in chunks] == [False, True, False, True]
    for chunk in chunks:
        store.ingest_many([("h1", chunk, pregroup(chunk))])
    result = store.ingest_many([("h2", c, pregroup(c)) for c in chunks])  # one flush
    assert (result.stored, result.duplicates) == (30, 16)
    plain = [trains(31, 40), gpu(41) + trains(42, 50)]  # in order: merged, not routed
    assert store.ingest_many([("h2", c, pregroup(c)) for c in plain]).stored == 20
    with store.cursor() as cur:
        rows = cur.execute("SELECT host, seq FROM train ORDER BY host, seq").fetchall()
    expected = [s for s in range(1, 51) if s not in (11, 41)]
    assert rows == [("h1", s) for s in expected if s <= 30] + [("h2", s) for s in expected]
    assert (store.high_water("h1"), store.high_water("h2")) == (30, 50)


def test_the_flush_insert_the_ingest_bench_times_stores_what_a_flush_stores(
        store: Store, tmp_path) -> None:
    """`insert_statement` is a flush's own INSERT for one host's lines of a table: the
    benchmark's bound on DuckDB's CPU is worth something only if it stores the same rows."""
    lines = gpu(5, util=75.0) + gpu(6, index=1, util=25.0)
    path = tmp_path / "gpu.ndjson"
    path.write_bytes(lines)
    query, params = insert_statement("gpu")
    with store.write_cursor() as cur:
        cur.execute(query, params(path=str(path), host="h1", offset=100))
    with store.cursor() as cur:
        assert cur.execute("SELECT host, seq, gpu, util, procs->>'$[0].rank' FROM gpu "
                           "ORDER BY seq").fetchall() == [
            ("h1", 105, 0, 75.0, "0"), ("h1", 106, 1, 25.0, "0")]
    with Store(tmp_path / "flushed.duckdb") as flushed:
        flushed.ingest("h1", header() + lines)
        with flushed.cursor() as cur:
            assert cur.execute("SELECT gpu, util, procs->>'$[0].rank' FROM gpu "
                               "ORDER BY seq").fetchall() == [(0, 75.0, "0"), (1, 25.0, "0")]
