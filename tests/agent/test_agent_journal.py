from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

from agent.journal.journal import Journal, JournalReader, line_seq, list_segments


def _seqs(state_dir: Path, after: int = 0) -> list[int]:
    return [r["seq"] for r in JournalReader(state_dir).records(after)]


def test_seq_strictly_increasing_across_batches_and_restarts(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    assert journal.head == 0
    assert journal.append("event", {"kind": "a"}) == 1
    assert journal.append_many([("gpu", {"gpu": 0}), ("gpu", {"gpu": 1})]) == [2, 3]
    journal.close()
    reopened = Journal(tmp_path)
    assert reopened.head == 3
    assert reopened.append("host", {"cpu": 1.0}) == 4
    reopened.close()
    records = list(JournalReader(tmp_path).records())
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    # protocol: t first, seq second, on every line
    raw = (tmp_path / "journal" / "00000000000000000001.ndjson").read_bytes()
    for line in raw.splitlines():
        assert list(json.loads(line))[:2] == ["t", "seq"]


def test_journal_id_is_persisted(tmp_path: Path) -> None:
    first = Journal(tmp_path)
    first.close()
    again = Journal(tmp_path)
    again.close()
    assert first.journal_id == again.journal_id == JournalReader(tmp_path).journal_id
    other = Journal(tmp_path / "elsewhere")
    other.close()
    assert other.journal_id != first.journal_id


def test_torn_last_line_is_cut_on_open(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.append_many([("event", {"kind": "x", "n": i}) for i in range(5)])
    journal.close()
    segment = list_segments(tmp_path / "journal")[-1][1]
    whole = segment.read_bytes()
    segment.write_bytes(whole + b'{"t":"event","seq":6,"ts":1.0,"kin')  # killed mid-write
    assert JournalReader(tmp_path).bounds() == (1, 5)  # readers never see the torn part
    reopened = Journal(tmp_path)
    assert reopened.truncated_bytes == len(b'{"t":"event","seq":6,"ts":1.0,"kin')
    assert segment.read_bytes() == whole
    assert reopened.append("event", {"kind": "after"}) == 6
    reopened.close()
    assert _seqs(tmp_path) == [1, 2, 3, 4, 5, 6]


def test_garbage_tail_line_with_newline_is_cut_too(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.append_many([("event", {"kind": "x"})] * 3)
    journal.close()
    segment = list_segments(tmp_path / "journal")[-1][1]
    with open(segment, "ab") as f:
        f.write(b'{"t":"event","seq":4,"ts":1.0,"kind":\x00\x00\x00\n')
    reopened = Journal(tmp_path)
    assert reopened.head == 3
    reopened.close()


def test_read_from_middle_of_segments(tmp_path: Path) -> None:
    journal = Journal(tmp_path, segment_bytes=2000)
    for i in range(200):
        journal.append("train", {"job": "j", "rank": 0, "step": i})
    journal.close()
    segments = list_segments(tmp_path / "journal")
    assert len(segments) > 5
    for after in (0, 1, 7, 57, segments[2][0] - 1, segments[2][0], 199, 200, 500):
        assert _seqs(tmp_path, after) == list(range(after + 1, 201)), after


def test_follow_across_rotation_sees_every_record_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path, segment_bytes=4096)
    reader = JournalReader(tmp_path)
    done = threading.Event()
    seen: list[int] = []

    def consume() -> None:
        for chunk in reader.chunks(0, follow=True, poll=0.005,
                                   stop=lambda: done.is_set() and seen[-1:] == [3000]):
            seen.extend(line_seq(line) for line in chunk.splitlines())

    thread = threading.Thread(target=consume)
    thread.start()
    for i in range(0, 3000, 10):
        journal.append_many([("train", {"step": i + k}) for k in range(10)])
    done.set()
    thread.join(30)
    journal.close()
    assert not thread.is_alive()
    assert seen == list(range(1, 3001))


def test_size_cap_drops_oldest_segments_and_journals_the_count(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=20_000, segment_bytes=4_000)
    for i in range(600):
        journal.append("train", {"job": "j", "rank": 0, "step": i})
    journal.close()
    reader = JournalReader(tmp_path)
    first, head = reader.bounds()
    records = list(reader.records())
    drops = [r for r in records if r["t"] == "event" and r["kind"] == "dropped"]
    assert first > 1
    assert drops, "a dropped event must be journaled"
    # Each event names the range it dropped; the ranges still visible are contiguous and
    # end right below the oldest seq held (older events went with older segments).
    for earlier, later in itertools.pairwise(drops):
        assert later["data"]["first"] == earlier["data"]["last"] + 1
    for drop in drops:
        data = drop["data"]
        assert data["count"] == data["last"] - data["first"] + 1
        assert data["reason"] == "size cap"
    assert drops[-1]["data"]["last"] == first - 1
    assert [r["seq"] for r in records] == list(range(first, head + 1))
    size = sum(p.stat().st_size for _, p in list_segments(tmp_path / "journal"))
    assert size <= 20_000 + 4_000


def test_age_cap_drops_old_segments(tmp_path: Path) -> None:
    now = [time.time()]
    journal = Journal(tmp_path, max_age=3600.0, segment_bytes=1_000, clock=lambda: now[0])
    for i in range(60):
        journal.append("train", {"step": i})
    segments = list_segments(tmp_path / "journal")
    assert len(segments) > 2
    assert journal.enforce_retention() == 0  # files are fresh
    now[0] += 2 * 3600.0  # two hours later by the journal's clock: all closed ones expire
    dropped = journal.enforce_retention()
    journal.close()
    assert dropped == segments[-1][0] - 1
    events = [r for r in JournalReader(tmp_path).records() if r.get("kind") == "dropped"]
    assert events[-1]["data"] == {"count": dropped, "reason": "age cap", "first": 1,
                                  "last": dropped}
