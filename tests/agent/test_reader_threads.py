"""The agent's reader threads outlive what goes wrong under them: the job-output follower
a failed read of a log file (a network mount's EIO or ESTALE), and the sampler thread's
look at the spool tailer's files while the main loop changes them."""

from __future__ import annotations

import builtins
import errno
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.job import supervisor as supervisor_module
from agent.job.supervisor import Supervisor
from agent.journal.journal import Journal, JournalReader
from agent.journal.spool import SpoolFile, SpoolTailer
from tests.harness.waiting import wait_for


class _FlakyLog:
    """A log file opened by the follower whose next read fails once, as a read on a
    network mount does when its server hiccups; otherwise the real file."""

    def __init__(self, f: Any, failures: list[int]) -> None:
        self._f = f
        self._failures = failures

    def read(self, size: int = -1) -> bytes:
        if self._failures:
            self._failures.pop()
            raise OSError(errno.EIO, "Input/output error")
        return self._f.read(size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def test_the_output_follower_outlives_a_failed_read_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A read of the job's stdout fails once after its first line was journaled: the
    follower says so once, opens the file again and journals what follows (before, its
    thread ended and no more output reached the journal for the rest of the attempt)."""
    failures: list[int] = []
    opened: list[str] = []

    def open_logs(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115  # the follower closes it
        if mode == "rb" and str(path).endswith(".out"):
            opened.append(str(path))
            return _FlakyLog(f, failures)
        return f

    monkeypatch.setattr(supervisor_module, "open", open_logs, raising=False)
    go = tmp_path / "go"
    script = textwrap.dedent(f"""
        import os, sys, time
        print("before the error", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        print("after the error", flush=True)
    """)
    journal = Journal(tmp_path / "state")
    sup = Supervisor([sys.executable, "-c", script], "flaky", tmp_path / "run", journal)
    sup.start()
    try:
        def lines() -> list[str]:
            return [r["line"] for r in JournalReader(tmp_path / "state").records()
                    if r["t"] == "log" and r.get("job") == "flaky"]

        wait_for(lambda: "before the error" in lines(), 20, "the first line")
        failures.append(1)  # the follower's next read of stdout fails
        go.write_text("go")
        assert sup.wait(20) == 0
        assert "after the error" in lines()
        assert not failures  # the failing read did happen
        assert len(opened) >= 2  # and the file was opened again after it
        said = [line for line in capsys.readouterr().err.splitlines()
                if "reading its stdout" in line]
        assert len(said) == 1, said
        assert "Input/output error" in said[0]
    finally:
        if sup.running:
            sup.stop(0.0)
        journal.close()


def test_the_spool_files_pids_are_read_whatever_the_main_loop_does_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sampler thread asks the tailer for the trainers' pids while the main loop's
    poll drops finished files: the answer must come whole (before, "dictionary changed
    size during iteration" cost that interval's samples)."""
    before = sys.getswitchinterval()
    journal = Journal(tmp_path / "state")
    tailer = SpoolTailer(journal, [tmp_path / "run"], settle=0.0)
    for n in range(3000):
        sf = SpoolFile(tmp_path / f"rank-{n}.ndjson", tmp_path / "run", "job", n, 1, n)
        sf.pid = 10000 + n
        tailer._files[str(sf.path)] = sf
    errors: list[BaseException] = []
    done = threading.Event()
    answers = [0]

    def sampler() -> None:
        while not done.is_set():
            try:
                tailer.pid_ranks()
                answers[0] += 1
            except RuntimeError as exc:
                errors.append(exc)
                return

    sys.setswitchinterval(1e-5)
    reader = threading.Thread(target=sampler, name="sampler", daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 0.5
        n = 0
        while time.monotonic() < deadline and not errors:
            # As `poll` drops a finished file, and discovery meets a new one.
            path = str(tmp_path / f"rank-{n % 3000}.ndjson")
            sf = tailer._files.pop(path)
            tailer._files[path] = sf
            n += 1
    finally:
        done.set()
        reader.join(10)
        sys.setswitchinterval(before)
        journal.close()
    assert not errors, errors[0]
    assert answers[0] > 0
