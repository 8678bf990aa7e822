"""`cockpit import` of TensorBoard event files that are damaged or hostile, written by
TensorBoard's own writer and then corrupted by hand: a bad record costs only itself,
named by file and byte offset, and what cannot be read is said; and on sound files the
import's reader holds exactly what TensorBoard's `EventAccumulator` holds."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from cockpit.app.cli import main
from cockpit.importers import tfrecord
from cockpit.importers.records import ImportCounts
from cockpit.importers.sources import import_paths
from cockpit.importers.tensorboard import read_run

T0 = 1_790_000_000.0
STEPS = 10


def scalar(step: int, tag: str = "train/loss", value: float | None = None,
           wall: float | None = None) -> Any:
    event = event_pb2.Event(step=step, wall_time=T0 + step if wall is None else wall)
    event.summary.value.add(tag=tag, simple_value=1.0 / (step + 1) if value is None else value)
    return event


def write_run(run: Path, events: list[Any], suffix: str = "") -> Path:
    """The events, after the file-version event the writer puts first, in a new file."""
    run.mkdir(parents=True, exist_ok=True)
    before = set(run.iterdir())
    writer = EventFileWriter(str(run), filename_suffix=suffix)
    for event in events:
        writer.add_event(event)
    writer.close()
    [path] = set(run.iterdir()) - before
    return path


def offsets(data: bytes) -> list[int]:
    """Where each record of a sound file starts."""
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from("<Q", data, pos)[0] + 4
    return out


def record(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    return (head + struct.pack("<I", masked_crc32c(head)) + data
            + struct.pack("<I", masked_crc32c(data)))


def sound_run(tmp_path: Path) -> tuple[Path, bytes, list[int]]:
    """A run of STEPS scalar events (records 1..STEPS; record 0 is the file version)."""
    path = write_run(tmp_path / "run", [scalar(s) for s in range(STEPS)])
    data = path.read_bytes()
    return path, data, offsets(data)


def steps_of(source: Path, counts: ImportCounts) -> list[int]:
    return [p.step for p in read_run(source, counts)]


def test_a_record_failing_its_crc_costs_only_itself(tmp_path: Path) -> None:
    """TensorBoard's reader stops at it, taking the file for one still being written:
    every later record was lost without a word."""
    path, data, at = sound_run(tmp_path)
    bad = bytearray(data)
    bad[at[4] + 14] ^= 0xFF  # a byte of record 4's data (step 3)
    path.write_bytes(bytes(bad))
    counts = ImportCounts()
    assert steps_of(path.parent, counts) == [s for s in range(STEPS) if s != 3]
    assert counts.skipped == {"record failed its CRC check": 1}
    assert counts.samples == {"record failed its CRC check": [f"{path.name} offset {at[4]}"]}
    assert counts.problems == []


@pytest.mark.parametrize("junk", [b"\x00garbage-bytes-here\xff" * 3, b"\x00" * (1 << 20)],
                         ids=["garbage", "a megabyte of zeros"])
def test_garbage_between_records_is_passed_over_and_the_rest_read(
        tmp_path: Path, junk: bytes) -> None:
    path, data, at = sound_run(tmp_path)
    path.write_bytes(data[:at[5]] + junk + data[at[5]:])
    counts = ImportCounts()
    assert steps_of(path.parent, counts) == list(range(STEPS))
    assert counts.skipped == {"bad record header": 1}
    assert counts.samples == {"bad record header": [
        f"{path.name} offset {at[5]} ({len(junk)} bytes passed over)"]}
    assert counts.problems == []


def test_the_search_for_the_next_record_sees_one_across_its_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Garbage of every length around a small window: the next header is found wherever
    it falls, at a window's edge included, and nothing of the garbage is taken for one."""
    monkeypatch.setattr(tfrecord, "WINDOW", 16)
    path, data, at = sound_run(tmp_path)
    for n in range(1, 50):
        junk = bytes((7 * k + 1) % 256 for k in range(n))
        path.write_bytes(data[:at[5]] + junk + data[at[5]:])
        counts = ImportCounts()
        assert steps_of(path.parent, counts) == list(range(STEPS)), n
        assert counts.samples == {"bad record header": [
            f"{path.name} offset {at[5]} ({n} bytes passed over)"]}, n


def test_a_record_that_is_not_an_event_is_counted_and_the_rest_read(tmp_path: Path) -> None:
    """Its CRCs check but its payload is no protobuf: it once raised out of the import."""
    path, data, at = sound_run(tmp_path)
    path.write_bytes(data[:at[5]] + record(b"\xff\xff\xff\xff\xff") + data[at[5]:])
    counts = ImportCounts()
    assert steps_of(path.parent, counts) == list(range(STEPS))
    assert counts.skipped == {"record not an event": 1}
    assert counts.samples == {"record not an event": [f"{path.name} offset {at[5]}"]}


def test_a_length_past_the_end_of_the_file_is_not_allocated(tmp_path: Path) -> None:
    """A header of 2**62 bytes with a valid CRC once asked for the memory (MemoryError)."""
    path, data, at = sound_run(tmp_path)
    head = struct.pack("<Q", 2**62)
    path.write_bytes(data[:at[5]] + head + struct.pack("<I", masked_crc32c(head)) + b"xxxx"
                     + data[at[5]:])
    counts = ImportCounts()
    assert steps_of(path.parent, counts) == list(range(STEPS))
    assert counts.skipped == {"record length past the end of the file": 1}
    assert counts.samples["record length past the end of the file"] == [
        f"{path.name} offset {at[5]} (16 bytes passed over)"]


def test_a_record_over_the_cap_is_skipped_unread(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfrecord, "MAX_RECORD", 100)
    big = scalar(5, tag="x" * 150)  # its record is over 100 bytes, a sound one all the same
    path = write_run(tmp_path / "run", [scalar(s) if s != 5 else big for s in range(STEPS)])
    at = offsets(path.read_bytes())
    counts = ImportCounts()
    assert steps_of(path.parent, counts) == [s for s in range(STEPS) if s != 5]
    assert list(counts.skipped) == ["record too large"]
    assert counts.samples["record too large"][0].startswith(f"{path.name} offset {at[6]} (")


@pytest.mark.parametrize(("cut", "why"), [
    (10, "the file ends inside a record"),
    (-1, "no valid record after a bad record header"),
])
def test_an_unreadable_tail_is_said_and_fails_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int, why: str) -> None:
    path, data, at = sound_run(tmp_path)
    if cut > 0:  # the last record cut short: a writer stopped in the middle of it
        tail = len(data) - cut
        path.write_bytes(data[:-cut])
    else:
        tail = len(data)
        path.write_bytes(data + b"\x01garbage" * 8)
    rec = tmp_path / "rec.duckdb"
    code = main(["import", str(path.parent), "-o", str(rec)])
    out, err = capsys.readouterr()
    assert code == 1
    kept = STEPS - 1 if cut > 0 else STEPS
    assert f"job run on host import: {kept} points -> {kept + 1} records" in out
    unread = (len(data) - cut - at[-1]) if cut > 0 else 64
    offset = at[-1] if cut > 0 else tail
    assert f"cockpit: {path}: {unread} bytes from offset {offset} unread: {why}" in err


def test_an_empty_event_file_writes_nothing(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1790000000.host").write_bytes(b"")
    rec = tmp_path / "rec.duckdb"
    code = main(["import", str(run), "-o", str(rec)])
    out, _ = capsys.readouterr()
    assert code == 1 and not rec.exists()
    assert f"{run}: tensorboard: no metrics found, nothing written" in out


def test_skipped_points_are_named_by_tag_and_step_shown_as_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = [scalar(1), scalar(2**62), scalar(3, tag="\x1b[2Jevil", wall=float("nan"))]
    run = tmp_path / "run"
    write_run(run, events)
    [done] = import_paths([run], tmp_path / "a.duckdb")
    assert done.counts.samples == {
        "step out of range": [f"tag 'train/loss' step {2**62}"],
        "time not a valid timestamp": ["tag '\\x1b[2Jevil' step 3"]}
    code = main(["import", str(run), "-o", str(tmp_path / "b.duckdb")])
    out, _ = capsys.readouterr()
    assert code == 0 and "\x1b" not in out
    assert f"  skipped 1: step out of range: tag 'train/loss' step {2**62}" in out


def _scalar_tensor(step: int, tag: str, value: float, plugin: str | None) -> Any:
    event = event_pb2.Event(step=step, wall_time=T0 + step)
    v = event.summary.value.add(tag=tag, tensor=tensor_util.make_tensor_proto(value))
    if plugin is not None:
        v.metadata.CopyFrom(summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin)))
    return event


def _restart(step: int) -> Any:
    return event_pb2.Event(step=step, wall_time=T0 + step, session_log=event_pb2.SessionLog(
        status=event_pb2.SessionLog.START))


def _accumulated(run: Path) -> list[tuple[str, int, float]]:
    acc = ea.EventAccumulator(str(run), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    out = [(tag, e.step, e.value) for tag in acc.Tags()[ea.SCALARS] for e in acc.Scalars(tag)]
    for tag in acc.Tags()[ea.TENSORS]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars":
            out += [(tag, e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                    for e in acc.Tensors(tag)]
    return out


def test_sound_files_read_as_the_accumulator_reads_them(tmp_path: Path) -> None:
    """Its purges (a session restart marker; in a file with no version, a tag whose step
    goes back), its file order, and TF2's scalars written as tensors, point for point."""
    marked = tmp_path / "marked"
    write_run(marked, [scalar(s) for s in range(8)] + [_restart(4)]
              + [scalar(s, value=2.0 + s) for s in range(4, 10)])
    write_run(marked, [scalar(s, tag="later", wall=T0 + 100 + s) for s in range(3)],
              suffix=".b")
    unversioned = tmp_path / "unversioned"
    unversioned.mkdir()
    events = ([scalar(s) for s in range(6)] + [scalar(s, tag="other") for s in range(6)]
              + [scalar(s, value=5.0) for s in range(3, 8)])
    (unversioned / "events.out.tfevents.1790000000.host").write_bytes(
        b"".join(record(e.SerializeToString()) for e in events))
    tensors = tmp_path / "tensors"
    write_run(tensors, [_scalar_tensor(0, "acc", 0.5, "scalars"),
                        _scalar_tensor(1, "acc", 0.75, None),
                        _scalar_tensor(0, "hist", 1.0, "histograms"),
                        _scalar_tensor(1, "hist", 2.0, None), scalar(0)])
    for run in (marked, unversioned, tensors):
        counts = ImportCounts()
        got = [(p.name, p.step, p.value) for p in read_run(run, counts)]
        assert got == _accumulated(run), run.name
        assert counts.skipped == {} and counts.problems == []
    assert len(_accumulated(marked)) == 4 + 6 + 3  # steps 4-7 of the first session purged
    assert len(_accumulated(unversioned)) == 3 + 6 + 5  # steps 3-5 of train/loss purged
