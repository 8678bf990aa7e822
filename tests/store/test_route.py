"""The fast split of a chunk must route exactly as the line-by-line router does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.ingest.route import Segment, merge_grouped, pregroup, route_chunk, split_chunk
from tests.store.wire import gpu, header, train, trains


def _journal_marks(header_: dict[str, object], mark: int) -> int:
    """A stand-in for the store's header rule: a new journal restarts the mark."""
    if header_.get("journal_id") == "J2":
        return 0
    return max(mark, int(header_.get("from", 0)))  # type: ignore[arg-type]


def _route(split, chunk: bytes, high_water: int) -> tuple[list[tuple], list[tuple]]:
    calls: list[tuple] = []

    def on_header(h: dict[str, object], mark: int) -> int:
        calls.append((h.get("journal_id"), mark))
        return _journal_marks(h, mark)

    return [_shape(s) for s in split(chunk, high_water, on_header)], calls


def _shape(segment: Segment) -> tuple:
    return (
        segment.header,
        {t: list(lines) for t, lines in segment.groups.items()},
        {t: list(seqs) for t, seqs in segment.seqs.items()},
        segment.duplicates,
        [m.error for m in segment.malformed],
        segment.start_mark,
        segment.end_mark,
    )


def _mixed(first: int, last: int) -> bytes:
    return b"".join(gpu(s, s % 8) if s % 3 else train(s, s) for s in range(first, last + 1))


CHUNKS = {
    "plain": (_mixed(11, 40), 10),
    "plain at the mark": (_mixed(11, 40), 11),
    "header then backlog": (header("J1", start=10) + _mixed(11, 40), 10),
    "header then resend straddling the mark": (header("J1", start=5) + _mixed(6, 40), 20),
    "header then all duplicates": (header("J1", start=5) + _mixed(6, 15), 20),
    "new journal": (header("J2", start=0) + _mixed(1, 30), 500),
    "header alone": (header("J1", start=10), 10),
    "header then a broken line": (header("J1") + _mixed(1, 5) + b"{not json\n" + _mixed(6, 9), 0),
    "header then a second header": (header("J1") + trains(1, 4) + header("J2") + trains(1, 2), 0),
    "two headers at the start": (header("J1") + header("J1", start=3) + trains(4, 9), 0),
    "malformed header": (b'{"t":"stream","seq":0,\n' + trains(1, 5), 0),
    "blank line after the header": (header("J1") + b"\n" + trains(1, 5), 0),
    "non-canonical line": (header("J1") + b'{"seq":1,"t":"train","ts":1.0}\n' + trains(2, 4), 0),
    "empty": (b"", 0),
}


@pytest.mark.parametrize("name", list(CHUNKS))
def test_split_chunk_routes_as_route_chunk(name: str) -> None:
    chunk, high_water = CHUNKS[name]
    assert _route(split_chunk, chunk, high_water) == _route(route_chunk, chunk, high_water)


def test_the_first_chunk_of_a_connection_takes_the_fast_path() -> None:
    """After a reconnect the backlog arrives behind one header: grouped without per-line
    routing, which shows as the joined groups only the fast path fills in."""
    chunk = header("J1", start=10) + _mixed(11, 400)
    (segment,) = split_chunk(chunk, 10, lambda h, mark: max(mark, 10))
    assert set(segment.joined) == {"gpu", "train"}
    assert segment.joined["train"] == b"\n".join(segment.groups["train"])


def test_pregrouping_groups_plain_chunks_and_leaves_the_rest_to_the_flush() -> None:
    plain = _mixed(11, 40)
    grouped = pregroup(plain)
    assert grouped is not None and (grouped.head, grouped.tail) == (11, 40)
    (routed,) = route_chunk(plain, 10, lambda h, mark: mark)
    assert _shape(replace(grouped.segment, end_mark=40)) == _shape(routed)
    for name in ("header then backlog", "non-canonical line", "empty"):
        assert pregroup(CHUNKS[name][0]) is None, name


def test_pregrouped_chunks_merge_only_when_their_seqs_follow_on() -> None:
    parts = [pregroup(_mixed(first, first + 9)) for first in (11, 21, 31)]
    assert all(p is not None for p in parts)
    merged = merge_grouped(parts)  # type: ignore[arg-type]
    assert merged is not None and (merged.head, merged.tail) == (11, 40)
    (whole,) = route_chunk(_mixed(11, 40), 10, lambda h, mark: mark)
    assert _shape(replace(merged.segment, end_mark=40)) == _shape(whole)
    assert merged.segment.joined["train"] == b"\n".join(whole.groups["train"])
    resent = [parts[0], parts[1], pregroup(_mixed(15, 25))]
    assert merge_grouped(resent) is None  # type: ignore[arg-type]
