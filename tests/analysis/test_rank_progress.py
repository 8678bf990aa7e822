"""Each rank's step, speed and lag, and the table's rows: per rank, or per host."""

from __future__ import annotations

from cockpit.analysis.rank_progress import ProgressRow, progress_rows, rank_progress, rows_taken
from cockpit.analysis.ranks import RankSummary
from cockpit.snapshot import RankProgress


def summary(rank: int, host: str, step_time: float) -> RankSummary:
    return RankSummary(rank, host, step_time, step_time, None, None, 0, 10)


def test_lag_is_behind_the_rank_furthest_ahead_and_speed_from_the_step_time() -> None:
    latest = [{"rank": 1, "host": "b", "step": 97}, {"rank": 0, "host": "a", "step": 100},
              {"rank": 2, "host": "b", "step": None}]
    ranks = rank_progress(latest, [summary(0, "a", 0.5), summary(1, "b", 0.0)])
    assert ranks == (RankProgress(0, "a", 100, 2.0, 0), RankProgress(1, "b", 97, None, 3))


def test_few_ranks_are_listed_each_the_furthest_behind_first() -> None:
    ranks = (RankProgress(0, "a", 100, 2.0, 0), RankProgress(1, "a", 98, 1.5, 2))
    rows, more = progress_rows(ranks, 4)
    assert [r.label for r in rows] == ["rank 1", "rank 0"] and more == 0


def test_many_ranks_are_grouped_by_host_with_each_hosts_worst() -> None:
    ranks = tuple(RankProgress(r, f"h{r // 8}", 1000 - (5 if r == 13 else 0),
                               1.0 if r == 13 else 2.0, 5 if r == 13 else 0)
                  for r in range(32))
    rows, more = progress_rows(ranks, 3)
    assert rows == [ProgressRow("h1", "h1", 8, 995, 1.0, 5),
                    ProgressRow("h0", "h0", 8, 1000, 2.0, 0)]
    assert more == 2  # the last line says how many hosts are not shown


def test_the_lines_taken_are_counted_as_the_rows_would_fill_them() -> None:
    """`rows_taken` answers what `progress_rows` fills without building its rows."""
    def job(ranks: int, hosts: int) -> tuple[RankProgress, ...]:
        return tuple(RankProgress(r, f"h{r % hosts}", 100 - r % 5, 1.0, r % 5)
                     for r in range(ranks))
    for ranks, hosts in ((0, 1), (1, 1), (2, 1), (3, 1), (8, 1), (8, 2), (16, 2), (64, 8),
                         (1024, 128)):
        for lines in (0, 1, 2, 3, 5, 8, 200):
            rows, more = progress_rows(job(ranks, hosts), lines)
            assert rows_taken(job(ranks, hosts), lines) == len(rows) + (1 if more else 0), (
                ranks, hosts, lines)
