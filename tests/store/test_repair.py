"""A record refused for some of its values is stored without them, not lost whole."""

from __future__ import annotations

import json
from pathlib import Path

from agent.wire.protocol import encode
from cockpit.store import Store
from cockpit.store.repair import repair

HEADER = encode("stream", 0, {"protocol": 1, "journal_id": "j", "from": 0, "first": 1}, ts=1.0)
BIG = 2**70


def _line(seq: int, **fields: object) -> bytes:
    record = {"t": "train", "seq": seq, "ts": 2.0 + seq, "job": "j", "rank": 0, **fields}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"  # as the agent writes


def test_values_a_column_cannot_hold_become_null() -> None:
    fixed = repair(_line(1, step=1, loss=2.5, samples=BIG, lr="fast").strip(), "train")
    assert fixed is not None
    line, dropped = fixed
    assert dropped == ["samples", "lr"]
    record = json.loads(line)
    assert (record["loss"], record["samples"], record["lr"]) == (2.5, None, None)


def test_what_cannot_be_placed_is_not_repaired() -> None:
    assert repair(_line(1, step=1, loss=2.5).strip(), "train") is None  # nothing to do
    assert repair(b'{"t":"train","seq":"x","ts":1.0,"samples":1e400}', "train") is None
    assert repair(b'{"t":"train","seq":1,"ts":1e400,"loss":1.0}', "train") is None
    assert repair(b"[1, 2]", "train") is None
    assert repair(b"not json", "train") is None
    # What places a record on the chart or in the grid cannot be left out.
    assert repair(_line(1, step="three", loss=1.0).strip(), "train") is None
    assert repair(b'{"t":"gpu","seq":1,"ts":1.0,"gpu":"first","util":"busy"}', "gpu") is None


def test_a_record_with_an_out_of_range_value_keeps_its_loss(tmp_path: Path) -> None:
    """Before, one integer past 64 bits lost the whole step: its loss, its time."""
    with Store(tmp_path / "r.duckdb") as store:
        result = store.ingest("h", HEADER + _line(1, step=1, loss=3.0, samples=8)
                              + _line(2, step=2, loss=2.5, samples=BIG, tokens=10**31)
                              + b'{"t":"train","seq":3,"ts":"soon","step":3,"loss":2.4}\n'
                              + _line(4, step=4, loss=2.3, extra={"x": float("inf")})
                              .replace(b"Infinity", b"1e400"))
        assert (result.stored, result.malformed) == (3, 1)
        with store.cursor() as cur:
            rows = cur.execute("SELECT seq, loss, samples, tokens FROM train ORDER BY seq"
                               ).fetchall()
            errors = [e for (e,) in cur.execute("SELECT error FROM wire_errors").fetchall()]
    assert rows == [(1, 3.0, 8, None), (2, 2.5, None, None), (4, 2.3, None, None)]
    assert any("stored without samples, tokens" in e for e in errors)
    assert any("stored without extra" in e for e in errors)
    assert sum("stored without" not in e for e in errors) == 1  # seq 3: no time


def test_a_line_not_written_compactly_is_salvaged_too(tmp_path: Path) -> None:
    """Another writer's line (spaces after colons) takes the slow route, where orjson
    refuses the integer past 64 bits: it still reaches the store and keeps its loss."""
    spaced = json.dumps({"t": "train", "seq": 1, "ts": 3.0, "job": "j", "rank": 0,
                         "step": 1, "loss": 2.5, "samples": BIG}).encode() + b"\n"
    with Store(tmp_path / "r.duckdb") as store:
        result = store.ingest("h", HEADER + spaced)
        with store.cursor() as cur:
            rows = cur.execute("SELECT seq, loss, samples FROM train").fetchall()
    assert (result.stored, result.malformed, rows) == (1, 0, [(1, 2.5, None)])
