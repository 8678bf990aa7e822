from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from agent.job.output import clip_line, parse_rank
from agent.job.supervisor import Supervisor
from agent.journal.journal import Journal, JournalReader
from tests.harness.waiting import wait_for


def _journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "state")


def _records(tmp_path: Path) -> list[dict]:
    return list(JournalReader(tmp_path / "state").records())


def test_output_is_logged_with_ranks_and_exit_code(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    script = textwrap.dedent("""
        import os, sys
        print("plain line")
        print("[rank3]: from rank three", file=sys.stderr)
        print("x" * 10000)
        print("run dir", os.environ["COCKPIT_RUN_DIR"], os.environ["COCKPIT_JOB"],
              os.environ["PYTHONUNBUFFERED"], os.environ["TORCHELASTIC_ERROR_FILE"])
        sys.exit(3)
    """)
    sup = Supervisor([sys.executable, "-c", script], "j1", tmp_path / "run", journal)
    sup.start()
    assert sup.wait(20) == 3
    journal.close()
    records = _records(tmp_path)
    kinds = [r.get("kind") for r in records if r["t"] == "event"]
    assert kinds == ["job_started", "job_exited"]
    exited = records[-1]
    assert exited["data"]["returncode"] == 3 and exited["job"] == "j1"
    logs = [r for r in records if r["t"] == "log"]
    by_line = {r["line"][:20]: r for r in logs}
    assert by_line["plain line"]["rank"] is None
    assert by_line["plain line"]["stream"] == "stdout"
    assert by_line["[rank3]: from rank t"]["rank"] == 3
    assert by_line["[rank3]: from rank t"]["stream"] == "stderr"
    assert len(by_line["x" * 20]["line"]) == 4096
    env_line = next(r["line"] for r in logs if r["line"].startswith("run dir"))
    assert env_line.split()[2:5] == [str(tmp_path / "run"), "j1", "1"]
    assert env_line.endswith("j1.error.json")
    out = (tmp_path / "run" / "logs" / "j1.out").read_text()
    assert "x" * 10000 in out  # the file keeps whole lines
    assert "[rank3]" in (tmp_path / "run" / "logs" / "j1.err").read_text()


def test_stop_kills_the_whole_group_and_pid_ranks_reads_rank(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    # A launcher with two "ranks"; rank 1 ignores SIGTERM, so only SIGKILL ends it.
    script = textwrap.dedent("""
        import os, signal, subprocess, sys, time
        rank1 = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \\
                "print('ready', flush=True); time.sleep(60)"
        kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 env=dict(os.environ, RANK="0")),
                subprocess.Popen([sys.executable, "-c", rank1], env=dict(os.environ, RANK="1"))]
        for k in kids:
            k.wait()
    """)
    sup = Supervisor([sys.executable, "-c", script], "j2", tmp_path / "run", journal)
    sup.start()
    wait_for(lambda: "ready" in (tmp_path / "run" / "logs" / "j2.out").read_text(),
             what="rank 1 ignoring SIGTERM")
    ranks = sup.pid_ranks()
    assert sorted(r for r in ranks.values() if r is not None) == [0, 1]
    assert ranks[sup.pid] is None  # the launcher itself has no rank
    pids = list(ranks)
    code = sup.stop(grace=0.5)
    assert code is not None and code < 0  # killed by a signal
    journal.close()
    for pid in pids:
        wait_for(lambda pid=pid: not _alive(pid), timeout=10, what=f"pid {pid} gone")
    assert sup.pid_ranks() == {}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_log_rate_limit_keeps_the_file_whole(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    script = "for i in range(3000): print('line', i)"
    sup = Supervisor([sys.executable, "-c", script], "j3", tmp_path / "run", journal,
                     log_rate=1.0, log_burst=100)
    sup.start()
    assert sup.wait(20) == 0
    journal.close()
    logs = [r["line"] for r in _records(tmp_path) if r["t"] == "log"]
    notes = [line for line in logs if "not journaled: over the log rate limit" in line]
    kept = [line for line in logs if line.startswith("line ")]
    assert 100 <= len(kept) < 200
    # every line is either journaled or counted in a note
    assert sum(int(n[1:].split()[0]) for n in notes) + len(kept) == 3000
    assert (tmp_path / "run" / "logs" / "j3.out").read_text().count("\n") == 3000


def test_parse_rank_and_clip() -> None:
    assert parse_rank("[rank12]:[W ProcessGroup] x") == 12
    assert parse_rank("[default3]: hello") == 3
    assert parse_rank("[7]: hi") == 7
    assert parse_rank("rank0 said") is None
    assert clip_line(b"abc\r\n") == "abc"
    assert clip_line("é".encode() * 3000) == "é" * 2048
