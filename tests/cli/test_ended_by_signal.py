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
    import os, signal, sys, threading
    import duckdb
    from cockpit.app import cli

    def long_query(_args):
        con = duckdb.connect()
        # The signal comes while the query runs: DuckDB checks for it between tasks.
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGHUP)).start()
        con.execute("SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3").fetchall()
        return 0

    cli.COMMANDS["report"] = long_query
    sys.exit(cli.main(["report", "x.duckdb"]))
    """
)


def test_a_hangup_during_a_query_exits_with_the_hangup_status(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 128 + signal.SIGHUP, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
