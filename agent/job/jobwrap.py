"""The job's parent process: starts the job command and writes down how it ended.

The agent does not run torchrun as its own child. A `kill -9` of the agent would then
take away the only process able to learn torchrun's exit status (only a parent can
`wait` for it), and output pumped through pipes would meet a closed pipe (SIGPIPE) at
the job's next line. So the agent starts this small wrapper instead, and the wrapper:

- starts the command in a session of its own, with the environment the agent sends on
  its stdin (so the wrapper's own environment names no job: whatever finds a job's
  processes by their `COCKPIT_JOB` sees torchrun and its ranks only), its output appended
  straight to the job's log files (the agent tails those; nothing breaks when it is gone);
- writes a status file (atomically replaced) naming the command's pid and start time,
  then reports the same on its stdout, which it closes at once;
- waits, and adds the exit status (negative: the signal) to the status file.

A restarted agent finds the status file through its saved job state, re-attaches to
the still running job, and learns its exit status from the file, not from `wait`.

It imports only the standard library: it runs for the job's whole life and must not
depend on the agent's modules staying importable (a zipapp may be replaced meanwhile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import List, Optional


def start_ticks(pid: int) -> Optional[int]:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22): with the pid
    it names one process, so a recycled pid is never taken for the job. None if
    unreadable."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def write_status(path: str, status: dict) -> None:
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(status, separators=(",", ":")))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _report(line: dict) -> None:
    try:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
    except OSError:  # the agent is gone already: the status file says it all
        pass


def main(argv: Optional[List[str]] = None) -> int:
    """`STATUS OUT ERR CWD LAUNCH_ID -- CMD…`, the command's environment as a JSON object
    on stdin."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 7 or args[5] != "--":
        sys.stderr.write("usage: jobwrap STATUS OUT ERR CWD LAUNCH_ID -- CMD...\n")
        return 2
    status_path, out_path, err_path, cwd, launch = args[:5]
    cmd = args[6:]
    try:
        env = json.loads(sys.stdin.buffer.read() or b"null")
    except ValueError:
        env = None
    if not isinstance(env, dict):
        env = dict(os.environ)
    try:
        with open(out_path, "ab") as out, open(err_path, "ab") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env=env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        where = exc.filename if exc.filename and exc.filename != cmd[0] else None
        _report({"error": "cannot start %r: %s%s" % (
            cmd[0], exc.strerror or exc, " (%s)" % where if where else "")})
        return 127
    status = {"v": 1, "launch": launch, "pid": proc.pid, "pid_start": start_ticks(proc.pid),
              "wrapper": os.getpid(), "wrapper_start": start_ticks(os.getpid()),
              "started_at": time.time()}
    try:
        write_status(status_path, status)
    except OSError as exc:
        _report(dict(status, warning="status file not written: %s" % exc))
    else:
        _report(status)
    # Nothing more for the agent: a dead agent's pipe must never hurt the wrapper.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    code = proc.wait()
    status.update(returncode=code, ended_at=time.time())
    try:
        write_status(status_path, status)
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
