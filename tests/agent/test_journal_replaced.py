"""A journal replaced under its readers (the state dir wiped, a new journal begun): the
new journal's seqs start again at 1 and its first segment takes the old one's file name,
so a reader that went on by its old offsets would send the new records as the old
journal's, the first of them cut mid-line."""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from agent.journal.journal import Journal, JournalReader, JournalReplaced
from agent.journal.stream import run_stream


def _journal(state_dir: Path, records: int, util: float) -> str:
    journal = Journal(state_dir)
    for i in range(records):
        journal.append("gpu", {"gpu": 0, "util": util + i})
    journal.close()
    return journal.journal_id


def _wipe(state_dir: Path) -> None:
    shutil.rmtree(state_dir)


def _seqs(chunks: list[bytes]) -> list[int]:
    return [json.loads(line)["seq"] for chunk in chunks for line in chunk.splitlines()]


def test_a_reader_refuses_to_read_a_replaced_journal_by_the_old_ones_offsets(
        tmp_path: Path) -> None:
    old = _journal(tmp_path, 5, 0.0)
    reader = JournalReader(tmp_path)
    assert _seqs(list(reader.chunks(0))) == [1, 2, 3, 4, 5]
    _wipe(tmp_path)
    tmp_path.mkdir()
    assert reader.still_this_journal() is False  # wiped, nothing begun: nothing to send
    assert list(reader.chunks(5)) == []
    new = _journal(tmp_path, 8, 100.0)
    with pytest.raises(JournalReplaced) as raised:
        list(reader.chunks(5))
    assert (raised.value.old_id, raised.value.new_id) == (old, new)
    assert old in str(raised.value) and new in str(raised.value)


def test_a_segment_file_replaced_between_the_check_and_the_read_is_not_read(
        tmp_path: Path) -> None:
    """The journal id is looked at before each read, but the wipe may fall between that
    look and the open: the segment's inode, noted when it was chosen, catches it."""
    _journal(tmp_path, 5, 0.0)

    class LateReader(JournalReader):
        looks = 0

        def still_this_journal(self) -> bool:
            self.looks += 1
            return True if self.looks <= 2 else super().still_this_journal()

    reader = LateReader(tmp_path)
    chunks = reader.chunks(0, follow=True, poll=0.01)
    assert _seqs([next(chunks)]) == [1, 2, 3, 4, 5]
    _wipe(tmp_path)
    new = _journal(tmp_path, 8, 100.0)
    with pytest.raises(JournalReplaced) as raised:
        next(chunks)
    assert raised.value.new_id == new


def test_a_stream_serves_a_journal_begun_under_it_whole_after_a_header_of_its_own(
        tmp_path: Path) -> None:
    old = _journal(tmp_path, 5, 0.0)
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr = io.StringIO()
    lines: list[dict] = []
    got = threading.Condition()

    def read() -> None:
        with os.fdopen(stdout_r, "rb") as out:
            for raw in out:
                with got:
                    lines.append(json.loads(raw))  # every line whole JSON, or this fails
                    got.notify_all()

    def wait_for(count: int) -> None:
        with got:
            assert got.wait_for(lambda: len(lines) >= count, timeout=20), lines

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    result: list[int] = []
    stream = threading.Thread(target=lambda: result.append(run_stream(
        tmp_path, 2, stdin_fd=stdin_r, stdout_fd=stdout_w, stderr=stderr, poll=0.01)))
    stream.start()
    try:
        wait_for(4)  # its header and seqs 3..5
        _wipe(tmp_path)
        time.sleep(0.1)  # the stream looks at the emptied state dir
        new = _journal(tmp_path, 3, 100.0)
        wait_for(8)
    finally:
        os.close(stdin_w)  # the cockpit closes the channel: the stream ends
        stream.join(10)
        os.close(stdin_r)
        os.close(stdout_w)
        reader.join(10)
    assert result == [0]
    headers = [(i, r) for i, r in enumerate(lines) if r["t"] == "stream"]
    assert [(i, r["journal_id"], r["from"]) for i, r in headers] == [(0, old, 2), (4, new, 0)]
    assert [(r["seq"], r["util"]) for r in lines if r["t"] == "gpu"] == [
        (3, 2.0), (4, 3.0), (5, 4.0), (1, 100.0), (2, 101.0), (3, 102.0)]
    assert f"journal {old} was replaced by journal {new}" in stderr.getvalue()
