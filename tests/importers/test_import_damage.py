"""`cockpit import` of damaged and hostile JSONL logs and wire recordings: a bad line or
value is counted with its line number and never stops the import, a compressed input
cut short keeps what was read and fails the command, and the summary claims only what
the store really stored."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import duckdb
import pytest

from cockpit.app.cli import main
from cockpit.importers import jsonl
from cockpit.importers.mapping import parse_overrides
from cockpit.importers.records import SAMPLES, ImportCounts
from cockpit.importers.sources import import_paths

T0 = 1_790_000_000.0


def _line(step: int, **extra: object) -> str:
    return json.dumps({"step": step, "ts": T0 + step, "loss": 1.0 / (step + 1), **extra})


def _log(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["import", *(str(a) for a in args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _train_steps(rec: Path, job: str | None = None) -> list[int]:
    con = duckdb.connect(str(rec), read_only=True)
    try:
        where, args = ("WHERE job = ?", [job]) if job else ("", [])
        return [s for (s,) in con.execute(f"SELECT step FROM train {where} ORDER BY step",
                                          args).fetchall()]
    finally:
        con.close()


def test_a_json_integer_too_big_for_a_float_is_skipped_and_the_rest_imported(
        tmp_path: Path) -> None:
    """orjson refuses a 400-digit integer, Python's `json` reads it as an int that
    `float()` refuses: the point is counted, with its line, not the import's end."""
    log = _log(tmp_path / "big.jsonl", [
        _line(1),
        '{"step": 2, "ts": 1700000001, "loss": 1' + "0" * 400 + "}",
        '{"step": 3, "ts": 1' + "0" * 400 + ', "loss": 0.5}',
        _line(4),
    ])
    rec = tmp_path / "rec.duckdb"
    [done] = import_paths([log], rec)
    assert done.counts.skipped == {"value out of range": 1, "time not a valid timestamp": 1}
    assert done.counts.samples == {"value out of range": ["line 2"],
                                   "time not a valid timestamp": ["line 3"]}
    assert _train_steps(rec) == [1, 4]


def test_a_name_python_decodes_but_no_writer_encodes_is_skipped(tmp_path: Path) -> None:
    """A lone surrogate (`\\ud800`) in a key: orjson refuses the line, `json` reads it,
    and the record could never be written; the point is counted, the line's others kept."""
    log = _log(tmp_path / "surrogate.jsonl", [_line(1), _line(2)[:-1] + ', "\\ud800": 1.0}'])
    rec = tmp_path / "rec.duckdb"
    [done] = import_paths([log], rec)
    assert done.counts.skipped == {"name not valid text": 1}
    assert done.counts.samples == {"name not valid text": ["line 2"]}
    assert _train_steps(rec) == [1, 2]


def test_a_count_beyond_the_stores_bigint_is_skipped_not_fatal(tmp_path: Path) -> None:
    """`samples`/`tokens` are the store's BIGINT: 1e300 (once a crash that left an empty
    job) and 1e19 (once stored as NULL without a word) are skipped and counted; as a
    plain `extra` metric the same value is a float, kept."""
    log = _log(tmp_path / "counts.jsonl", [
        _line(1, samples=1e300, tokens=10**23), _line(2, samples=1e19),
        _line(3, samples=32, tokens=2.5), _line(4, samples=-1)])
    rec = tmp_path / "rec.duckdb"
    [done] = import_paths([log], rec,
                          overrides=parse_overrides(["samples=samples", "tokens=tokens"]))
    assert done.counts.skipped == {"samples not a whole number in 0..2**63": 3,
                                   "tokens not a whole number in 0..2**63": 2}
    assert done.counts.samples["samples not a whole number in 0..2**63"] == [
        "step 1", "step 2", "step 4"]
    con = duckdb.connect(str(rec), read_only=True)
    assert con.execute("SELECT step, loss, samples, tokens FROM train ORDER BY step"
                       ).fetchall() == [(s, 1.0 / (s + 1), 32 if s == 3 else None, None)
                                        for s in range(1, 5)]
    con.close()
    as_extra = tmp_path / "extra.duckdb"
    [done] = import_paths([log], as_extra)
    assert done.counts.skipped == {} and done.counts.records == 5  # run + 4 train records
    con = duckdb.connect(str(as_extra), read_only=True)
    assert con.execute("SELECT extra->>'samples' FROM train WHERE step = 1").fetchone() == (
        "1e300",)
    con.close()


def _gzip_lines(n: int) -> bytes:
    return gzip.compress("".join(_line(s) + "\n" for s in range(n)).encode(), mtime=0)


@pytest.mark.parametrize("damage", ["cut short", "corrupt"])
def test_a_damaged_gzip_log_keeps_what_was_read_and_fails_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    data = _gzip_lines(20_000)
    if damage == "cut short":
        data = data[:len(data) // 2]
    else:  # a block of the deflate stream overwritten: zlib refuses it
        mid = len(data) // 2
        data = data[:mid] + b"\xff" * 64 + data[mid + 64:]
    log = tmp_path / "metrics.jsonl.gz"
    log.write_bytes(data)
    rec = tmp_path / "rec.duckdb"
    code, out, err = _cli(capsys, log, "-o", rec)
    assert code == 1
    [problem] = [line for line in err.splitlines() if "compressed data" in line]
    assert problem.startswith(f"cockpit: {log}: compressed data {damage} after ")
    read = int(problem.split(" after ")[1].split()[0])
    assert 0 < read < 20_000
    steps = _train_steps(rec)
    assert steps[:read] == list(range(read))  # every line before the damage imported
    assert f"{read} points -> " in out or damage == "corrupt"


def test_a_wire_recording_cut_short_keeps_its_lines_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [json.dumps({"t": "hello", "seq": 1, "ts": T0, "hostname": "gpu1", "proto": 1,
                         "agent_version": "x", "journal_id": "abc"})]
    lines += [json.dumps({"t": "train", "seq": s, "ts": T0 + s, "job": "j", "rank": 0,
                          "step": s, "loss": 1.0}) for s in range(2, 5000)]
    data = gzip.compress("".join(line + "\n" for line in lines).encode(), mtime=0)
    wire = tmp_path / "journal.ndjson.gz"
    wire.write_bytes(data[:len(data) * 3 // 4])
    rec = tmp_path / "rec.duckdb"
    code, out, err = _cli(capsys, wire, "-o", rec)
    assert code == 1
    read = int(err.split("compressed data cut short after ")[1].split()[0])
    assert f"{wire}: wire, host gpu1: {read} read: {read} stored, 0 malformed" in out
    assert len(_train_steps(rec)) == read - 1  # the hello apart


def test_a_wire_recordings_summary_counts_what_the_store_did(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """8 lines, 2 malformed: 6 stored and 2 kept in the wire errors, as the store says;
    imported again, all 8 are duplicates and none is claimed as a record."""
    good = [{"t": "hello", "seq": 1, "ts": T0, "hostname": "gpu1", "proto": 1,
             "agent_version": "x", "journal_id": "abc"},
            {"t": "run", "seq": 2, "ts": T0, "job": "j", "rank": 0, "world_size": 1}]
    lines = [json.dumps(r) for r in good]
    lines += [json.dumps({"t": "train", "seq": s, "ts": T0 + s, "job": "j", "rank": 0,
                          "step": s, "loss": 1.0 / s}) for s in (3, 4)]
    lines += ['{"t":"train","seq":5,"ts":1790000005,"job":"j","rank":0,"step":5,"loss":1.0',
              '{"t":"train","seq":6,"ts":1790000006,"job":"j","rank":0,"step":' + "1" * 40
              + ',"loss":1.0}', ""]
    lines += [json.dumps({"t": "train", "seq": s, "ts": T0 + s, "job": "j", "rank": 0,
                          "step": s, "loss": 1.0 / s}) for s in (7, 8)]
    wire = _log(tmp_path / "journal.ndjson", lines)
    rec = tmp_path / "rec.duckdb"
    [done] = import_paths([wire], rec)
    c = done.counts
    assert (c.points, c.records, c.malformed, c.duplicates) == (8, 6, 2, 0)
    con = duckdb.connect(str(rec), read_only=True)
    assert con.execute("SELECT count(*) FROM wire_errors").fetchone() == (2,)
    con.close()
    code, out, _ = _cli(capsys, wire, "-o", rec)
    assert code == 0
    assert (f"{wire}: wire, host gpu1: 8 read: 0 stored, 0 malformed (kept in the "
            "recording's wire errors), 8 duplicates") in out
    code, out, _ = _cli(capsys, wire, "-o", tmp_path / "fresh.duckdb")
    assert ("8 read: 6 stored, 2 malformed (kept in the recording's wire errors), "
            "0 duplicates") in out


def test_an_empty_log_writes_nothing_and_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No job dated 1970: a log with no metrics leaves no trace in the recording."""
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    rec = tmp_path / "rec.duckdb"
    code, out, err = _cli(capsys, empty, "-o", rec)
    assert code == 1
    assert f"{empty}: jsonl: no metrics found, nothing written" in out
    assert "nothing written to" in err and not rec.exists()
    log = _log(tmp_path / "metrics.jsonl", [_line(1)])
    code, out, _ = _cli(capsys, log, empty, "-o", rec)
    assert code == 0 and "no metrics found" in out
    con = duckdb.connect(str(rec), read_only=True)
    assert con.execute("SELECT job, ts FROM run").fetchall() == [("metrics", T0 + 1)]
    con.close()


def test_an_overlong_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    """A 16 MiB line is read at most MAX_LINE bytes at a time (once it was read whole:
    a 200 MiB line took 445 MiB), counted with its number, and the next line read."""
    log = tmp_path / "long.jsonl"
    with open(log, "w") as fh:
        fh.write(_line(1) + "\n")
        fh.write('{"step": 2, "pad": "' + "x" * (16 << 20) + '"}\n')
        fh.write(_line(3) + "\n")
    counts = ImportCounts()
    tracemalloc.start()
    try:
        points = jsonl.read_log(log, counts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * jsonl.MAX_LINE
    assert [p.step for p in points] == [1, 3]
    assert counts.skipped == {"line too long": 1}
    assert counts.samples == {"line too long": ["line 2"]}


def test_skipped_points_are_named_by_line_and_shown_bounded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [_line(0)] + ["not json"] * 7 + [_line(9, ts="soon")]
    log = _log(tmp_path / "bad.jsonl", lines)
    rec = tmp_path / "rec.duckdb"
    code, out, _ = _cli(capsys, log, "-o", rec)
    assert code == 0
    shown = ", ".join(f"line {n}" for n in range(2, 2 + SAMPLES))
    assert f"  skipped 7: not JSON: {shown}, …" in out.splitlines()
    assert "  skipped 1: time not a valid timestamp: line 9" in out.splitlines()
