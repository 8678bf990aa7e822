"""A signal that lands while DuckDB runs a query on the main thread still ends the
cockpit with the signal's status: the DuckDB client turns our handler's exception into
its own `RuntimeError("Query interrupted")`, which must not become a traceback and
status 1 (a closed SSH session would look like a crash)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, threading
    faulthandler.dump_traceback_later(75, exit=True)  # where it hung, should it hang
    # Started with SIGHUP blocked, as some supervisors start their children: the
    # cockpit unblocks the signals that end it, or the hangup would wait forever.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    import duckdb
    from cockpit.app import cli

    # Should DuckDB's cancelling hang, the watchdog ends it after this, not 30 s; the
    # query it interrupts at once ends in well under a second.
    cli.ENDING_GRACE_S = 10.0

    def long_query(_args):
        con = duckdb.connect()
        # The client imports what it may need on its first query, and an exception
        # raised in an import it tries is taken for a missing module: the signal must
        # come once the query runs, where DuckDB checks for it between tasks.
        con.execute("SELECT 1").fetchall()
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGHUP)).start()
        con.execute("SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3").fetchall()
        return 0

    cli.COMMANDS["report"] = long_query
    sys.exit(cli.main(["report", "x.duckdb"]))
    """
)


def _cockpit(script: str, where: Path, timeout: float) -> subprocess.CompletedProcess:
    """`script` run as its own process, as a shell would start the cockpit."""
    return subprocess.run(
        [sys.executable, "-c", script], cwd=where, capture_output=True, text=True,
        timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_a_hangup_during_a_query_exits_with_the_hangup_status(tmp_path: Path) -> None:
    done = _cockpit(SCRIPT, tmp_path, timeout=90)
    # DuckDB usually ends the query at once; should its clean-up hang (it has been
    # seen to), the cockpit's watchdog ends the process after its grace instead.
    assert done.returncode == 128 + signal.SIGHUP, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


HUNG_CLEANUP = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from cockpit.app import cli

    cli.ENDING_GRACE_S = 1.0

    def stuck(_args):
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        try:
            time.sleep(60)
        finally:
            time.sleep(60)  # a clean-up that never ends
        return 0

    cli.COMMANDS["report"] = stuck
    sys.exit(cli.main(["report", "x.duckdb"]))
    """
)


def test_a_way_out_that_hangs_is_cut_short_after_the_grace(tmp_path: Path) -> None:
    done = _cockpit(HUNG_CLEANUP, tmp_path, timeout=50)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "still ending 1 s after the signal; exiting now" in done.stderr
