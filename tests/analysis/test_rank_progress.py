"""Each rank's step, speed and lag, and the table's rows: per rank, or per host."""

from __future__ import annotations

from cockpit.analysis.rank_progress import ProgressRow, progress_rows, rank_progress
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
