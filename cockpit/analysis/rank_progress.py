"""Where each rank is: its step, its speed and how far it trails the rank furthest
ahead, per rank or, when there are more ranks than lines to show them, per host.

A data-parallel job moves at the pace of its slowest rank: a rank that falls behind
(a throttled GPU, a busy host) holds every other one at the next collective, so the
rows that matter are the ones trailing, and they are listed first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cockpit.analysis.ranks import RankSummary
from cockpit.snapshot import RankProgress


def rank_progress(latest: Iterable[Mapping[str, Any]],
                  summaries: Iterable[RankSummary] = ()) -> tuple[RankProgress, ...]:
    """Each rank's newest step (`latest`: the newest record per rank), its speed from
    its median recent step time (`summaries`), and its lag behind the furthest; by rank."""
    newest: dict[int, tuple[str, int]] = {}
    for r in latest:
        rank, step = r.get("rank"), r.get("step")
        if isinstance(rank, int) and isinstance(step, int) and not isinstance(step, bool):
            newest[rank] = (str(r.get("host") or "?"), step)
    if not newest:
        return ()
    speed = {s.rank: 1.0 / s.step_time for s in summaries if s.step_time and s.step_time > 0}
    ahead = max(step for _, step in newest.values())
    return tuple(RankProgress(rank, host, step, speed.get(rank), ahead - step)
                 for rank, (host, step) in sorted(newest.items()))


@dataclass(frozen=True)
class ProgressRow:
    """One line of the Progress pane's table: a rank, or a host's ranks together."""

    label: str  # "rank 3" or the host's name
    host: str
    ranks: int
    step: int  # the rank's, or the host's slowest rank's
    steps_per_second: float | None  # the slowest of them
    lag: int  # the furthest behind of them
    rank: int | None = None  # None: a host's row


def progress_rows(ranks: Sequence[RankProgress], lines: int) -> tuple[list[ProgressRow], int]:
    """The rows to show in `lines` lines, the furthest behind first, and how many more
    there are: one per rank when they fit, else one per host (its ranks' worst)."""
    if lines <= 0 or not ranks:
        return [], 0
    if len(ranks) <= lines:
        rows = [ProgressRow(f"rank {r.rank}", r.host, 1, r.step, r.steps_per_second, r.lag,
                            r.rank) for r in ranks]
    else:
        by_host: dict[str, list[RankProgress]] = {}
        for r in ranks:
            by_host.setdefault(r.host, []).append(r)
        rows = []
        for host, own in by_host.items():
            speeds = [r.steps_per_second for r in own if r.steps_per_second is not None]
            rows.append(ProgressRow(host, host, len(own), min(r.step for r in own),
                                    min(speeds) if speeds else None, max(r.lag for r in own)))
    rows.sort(key=lambda row: (-row.lag, row.steps_per_second or 0.0, row.label))
    if len(rows) <= lines:
        return rows, 0
    # The last line says how many more there are.
    return rows[:lines - 1], len(rows) - (lines - 1)


def rows_taken(ranks: Sequence[RankProgress], lines: int) -> int:
    """The lines `progress_rows(ranks, lines)` fills (its rows, and the line saying how
    many more), without sorting or grouping them: a pane sizing its parts asks this of
    a thousand ranks on every refresh."""
    if lines <= 0 or not ranks:
        return 0
    if len(ranks) <= lines:
        return len(ranks)
    return min(len({r.host for r in ranks}), lines)
