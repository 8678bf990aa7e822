from __future__ import annotations

import json
import os
import time
from pathlib import Path

from agent.hook import spool_writer
from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolTailer
from agent.wire import paths
from agent.wire.protocol import SPOOL_HEADER, SPOOL_VERSION

from .conftest import SpoolWriter


def _records(state: Path) -> list[dict]:
    return list(JournalReader(state).records())


def _steps(state: Path, rank: int = 0) -> list[int]:
    return [r["step"] for r in _records(state) if r["t"] == "train" and r["rank"] == rank]


def _errors(state: Path) -> list[dict]:
    return [r for r in _records(state) if r.get("kind") == "spool_error"]


def _setup(tmp_path: Path, settle: float = 0.0) -> tuple[Path, Path, Journal, SpoolTailer]:
    state, run = tmp_path / "state", tmp_path / "run"
    journal = Journal(state)
    return state, run, journal, SpoolTailer(journal, [run], settle=settle)


def test_the_hooks_file_is_named_and_headed_as_the_tailer_reads_it(tmp_path: Path) -> None:
    """One spelling of a spool file's name (`paths.spool_file`, `paths.SPOOL_FILE`) and
    header (`SPOOL_HEADER`, `SPOOL_VERSION`) for the hook that writes it and the tailer."""
    writer = spool_writer.SpoolWriter(str(tmp_path), "jobA", 7)
    try:
        path = Path(writer.path)
        assert path == paths.spool_file(paths.spool_dir(tmp_path, "jobA"), 7, writer.file_id)
        match = paths.SPOOL_FILE.match(path.name)
        assert match is not None and match.groups() == ("7", writer.file_id)
        header = json.loads(path.read_text().splitlines()[0])
        assert (header["t"], header["v"]) == (SPOOL_HEADER, SPOOL_VERSION)
    finally:
        writer.close()
    assert paths.SPOOL_FILE.match("rank-3.ndjson").groups() == ("3", None)  # an old writer's
    assert paths.SPOOL_FILE.match("rank-3.x.ndjson.tmp") is None


def test_records_get_seq_job_rank_and_src(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "jobA", 3)
    writer.new_file()
    writer.train(0)
    writer.raw(json.dumps({"t": "eval", "step": 0, "loss": 2.5}) + "\n")  # no job/rank
    assert tailer.poll() == 2
    journal.close()
    train, evaluation = _records(state)
    assert (train["t"], train["seq"], train["job"], train["rank"], train["step"]) == (
        "train", 1, "jobA", 3, 0)
    assert (evaluation["job"], evaluation["rank"]) == ("jobA", 3)  # from the header
    assert train["src"].startswith(writer.file_id + ":")
    assert int(evaluation["src"].split(":")[1]) == writer.path.stat().st_size


def test_partial_line_waits_and_malformed_line_is_reported_and_skipped(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "j", 0)
    writer.new_file()
    writer.train(0)
    writer.raw('{"t":"train","step":1,"lo')  # the writer is mid-line
    assert tailer.poll() == 1
    assert _errors(state) == []
    writer.raw('ss":0.5}\n')
    writer.raw("this is not json\n")
    writer.raw('{"step": 3}\n')  # no type
    writer.raw("[1, 2]\n")
    writer.train(5)
    tailer.poll()
    journal.close()
    assert _steps(state) == [0, 1, 5]
    errors = _errors(state)
    assert [(e["data"]["line"], e["job"], e["rank"]) for e in errors] == [
        (4, "j", 0), (5, "j", 0), (6, "j", 0)]  # header is line 1
    assert errors[0]["data"]["file"] == str(writer.path)
    assert "not valid JSON" in errors[0]["data"]["error"]
    assert "no record type" in errors[1]["data"]["error"]
    assert "not a JSON object" in errors[2]["data"]["error"]


def test_rotation_to_a_new_file_neither_skips_nor_repeats(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path, settle=0.0)
    writer = SpoolWriter(run, "j", 1)
    old = writer.new_file(ts=time.time() - 10)
    for step in range(5):
        writer.train(step)
    tailer.poll()
    for step in range(5, 8):
        writer.train(step)  # written after the last poll, before the rotation
    new = writer.new_file()
    for step in range(8, 12):
        writer.train(step)
    tailer.poll()
    assert not old.exists(), "a fully journaled file with a newer sibling is deleted"
    assert new.exists()
    writer.train(12)
    tailer.poll()
    journal.close()
    assert _steps(state, 1) == list(range(13))


def test_same_name_new_file_id_is_read_from_its_start(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "j", 0)
    path = writer.new_file()
    writer.train(0)
    writer.train(1)
    tailer.poll()
    # Replaced under the same name (and possibly the same inode) by a new writer.
    path.unlink()
    header = {"t": "spool", "v": 1, "file_id": "feedbeef", "job": "j", "rank": 0,
              "pid": os.getpid(), "ts": time.time()}
    path.write_text(json.dumps(header) + "\n" + json.dumps(
        {"t": "train", "step": 2, "loss": 1.0, "step_time": 0.1}) + "\n")
    tailer.poll()
    journal.close()
    assert _steps(state) == [0, 1, 2]


def test_restart_without_checkpoint_resumes_from_journal(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    writer = SpoolWriter(run, "j", 0)
    writer.new_file()
    for step in range(4):
        writer.train(step)
    tailer.poll()
    tailer.checkpoint()
    for step in range(4, 9):
        writer.train(step)
    tailer.poll()  # journaled, but the daemon "dies" before the next checkpoint
    journal.close()
    for step in range(9, 11):
        writer.train(step)
    journal = Journal(state)
    SpoolTailer(journal, [run], settle=0.0).poll()
    journal.close()
    assert _steps(state) == list(range(11))


def test_unfinished_last_line_of_an_abandoned_file_is_reported(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path, settle=0.0)
    writer = SpoolWriter(run, "j", 0)
    old = writer.new_file(ts=time.time() - 10)
    writer.train(0)
    writer.raw('{"t":"train","st')  # the process was killed mid-line
    writer.new_file()
    writer.train(1)
    tailer.poll()
    tailer.poll()
    journal.close()
    assert _steps(state) == [0, 1]
    errors = _errors(state)
    assert len(errors) == 1 and "incomplete last line" in errors[0]["data"]["error"]
    assert errors[0]["data"]["line"] == 3
    assert not old.exists()


def test_file_without_header_is_read_and_flagged(tmp_path: Path) -> None:
    state, run, journal, tailer = _setup(tmp_path)
    spool = run / "spool" / "j"
    spool.mkdir(parents=True)
    (spool / "rank-2.ndjson").write_text(json.dumps({"t": "train", "step": 7}) + "\n")
    tailer.poll()
    journal.close()
    assert _steps(state, 2) == [7]
    assert "no spool header" in _errors(state)[0]["data"]["error"]
