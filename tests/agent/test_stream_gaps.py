"""Records that retention drops before a reader far behind reaches them: the stream says
where they were, with a header, so the cockpit counts them lost instead of never
knowing they existed."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

from agent.journal.journal import Journal, JournalReader, list_segments
from agent.journal.stream import run_stream
from cockpit.store import Store


def _fill(state_dir: Path, records: int) -> list[tuple[int, Path]]:
    journal = Journal(state_dir, segment_bytes=4_000)
    for step in range(records):
        journal.append("train", {"job": "j", "rank": 0, "step": step, "loss": 1.0})
    journal.close()
    return list_segments(state_dir / "journal")


def _seqs(data: bytes) -> list[int]:
    return [json.loads(line)["seq"] for line in data.splitlines()]


def test_a_reader_yields_what_on_gap_gives_where_records_were_dropped(tmp_path: Path) -> None:
    segments = _fill(tmp_path, 300)
    assert len(segments) >= 5
    head = JournalReader(tmp_path).bounds()[1]
    gaps: list[tuple[int, int]] = []

    def on_gap(sent: int, following: int) -> bytes:
        gaps.append((sent, following))
        return b"GAP\n"

    chunks = JournalReader(tmp_path).chunks(0, on_gap=on_gap)
    assert _seqs(next(chunks)) == list(range(1, segments[1][0]))  # the first segment
    for _, path in segments[1:3]:
        path.unlink()  # what retention does while the reader is behind
    rest = list(chunks)
    assert gaps == [(segments[1][0] - 1, segments[3][0])]
    assert rest[0] == b"GAP\n"
    assert _seqs(b"".join(rest[1:])) == list(range(segments[3][0], head + 1))

    # Dropped before the reader starts: told at once, from where it was asked.
    gaps.clear()
    segments[3][1].unlink()
    again = list(JournalReader(tmp_path).chunks(segments[3][0] + 2, on_gap=on_gap))
    assert gaps == [(segments[3][0] + 2, segments[4][0])]
    assert _seqs(b"".join(again[1:])) == list(range(segments[4][0], head + 1))
    # Without on_gap (tools that only want the records), nothing stands in for them.
    quiet = JournalReader(tmp_path).chunks(segments[3][0] + 2)
    assert _seqs(b"".join(quiet))[0] == segments[4][0]


@pytest.mark.slow
def test_records_dropped_under_a_stream_are_counted_lost_by_the_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    segments = _fill(state, 6_000)  # ~100 segments: more than a pipe holds
    head = JournalReader(state).bounds()[1]
    segments[0][1].unlink()  # dropped before the stream starts: its header says so
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stream = threading.Thread(target=run_stream, args=(state, 0), kwargs=dict(
        stdin_fd=stdin_r, stdout_fd=stdout_w, stderr=io.StringIO(), poll=0.01))
    stream.start()
    received = b""
    with os.fdopen(stdout_r, "rb", buffering=0) as out:
        received += out.read(4096)  # the stream now waits on a full pipe, segments ahead
        dropped = segments[60:70]
        for _, path in dropped:
            path.unlink()
        while _seqs(received[: received.rfind(b"\n") + 1])[-1:] != [head]:
            received += out.read(65536)
        os.close(stdin_w)  # the cockpit closes the channel: the stream ends
        stream.join(10)
        os.close(stdin_r)
        os.close(stdout_w)
    lost = (segments[1][0] - 1) + (segments[70][0] - segments[60][0])
    kept = [s for s in range(1, head + 1)
            if segments[1][0] <= s < segments[60][0] or s >= segments[70][0]]
    headers = [json.loads(line) for line in received.splitlines() if b'"t":"stream"' in line]
    assert [(h["from"], h["first"]) for h in headers] == [
        (0, segments[1][0]), (segments[60][0] - 1, segments[70][0])]
    with Store(tmp_path / "rec.duckdb") as store:
        store.ingest("h", received)
        (row,) = store.hosts()
        with store.cursor() as cur:
            stored = [r[0] for r in cur.execute("SELECT seq FROM train ORDER BY seq").fetchall()]
    assert stored == kept
    assert row.lost == lost
