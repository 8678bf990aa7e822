"""Fixtures for the trainer-side tests: a Reporter in a temp run dir, shared charlm shards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.hook import Reporter
from tests.harness.torchrun import TrainerRun, read_spool, run_trainer


@pytest.fixture
def make_reporter(tmp_path: Path) -> Iterator:
    """Factory for Reporters writing under tmp_path; all are closed after the test.

    The flusher's timer is set long so that a test decides when records are written
    (`flush()`), unless it passes its own interval.
    """
    made: list[Reporter] = []

    def make(**kwargs) -> Reporter:
        kwargs.setdefault("run_dir", str(tmp_path / "run"))
        kwargs.setdefault("job", "job-a")
        kwargs.setdefault("rank", 0)
        kwargs.setdefault("flush_interval", 60.0)
        kwargs.setdefault("register_atexit", False)
        rep = Reporter(**kwargs)
        made.append(rep)
        return rep

    yield make
    for rep in made:
        rep.close()


@pytest.fixture
def spool(tmp_path: Path):
    """`spool(t=None, job="job-a")`: the records written so far under tmp_path/run."""

    def read(t: str | None = None, job: str = "job-a", run_dir: Path | None = None) -> list:
        return read_spool((run_dir or tmp_path / "run") / "spool" / job, t)

    return read


@pytest.fixture(scope="session")
def charlm_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shard directory shared by the trainer runs of a session (prepared by the first)."""
    return tmp_path_factory.mktemp("charlm-data")


@pytest.fixture
def run_charlm() -> Iterator:
    """`run_trainer`, with every job it started killed at teardown if still running."""
    started: list[TrainerRun] = []

    def start(*args, **kwargs) -> TrainerRun:
        run = run_trainer(*args, **kwargs)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()
