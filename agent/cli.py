"""`cockpit-agent`: run, stream, status, build-zipapp, version.

Every failure a user can cause (bad arguments, a state dir in use or unreadable, a job
command that does not exist) ends as one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from agent import __version__
from agent.wire import paths
from agent.wire.protocol import PROTOCOL_VERSION

PROG = "cockpit-agent"
# Beyond threading.TIMEOUT_MAX (about 292 years) the sampler's wait overflows and its
# thread dies; a day is already far past any useful sampling interval.
MAX_INTERVAL = 86400.0


def default_state_dir() -> Path:
    """`$COCKPIT_AGENT_STATE_DIR`, else `paths.DEFAULT_STATE_DIR`: the cockpit's inventory
    default too, so that a daemon started by hand is the one the cockpit streams from."""
    env = os.environ.get("COCKPIT_AGENT_STATE_DIR")
    if env:
        return Path(env)
    return Path(os.path.expanduser(paths.DEFAULT_STATE_DIR))


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line, exit code 2."""


def _float(text: str) -> float:
    """float() also takes nan and inf, which a seconds or days option turns into a busy
    loop, a crashed thread or an emptied journal: every check on its result is written
    so that nan fails it."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None


def _positive_interval(text: str) -> float:
    value = _float(text)
    if not (math.isfinite(value) and value >= 0.25):
        raise argparse.ArgumentTypeError(
            "must be a finite number of seconds >= 0.25 (got %s)" % text)
    if value > MAX_INTERVAL:
        raise argparse.ArgumentTypeError("must be at most %d s, one day (got %s)"
                                         % (MAX_INTERVAL, text))
    return value


def _positive_number(text: str) -> float:
    value = _float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError("must be a finite number > 0 (got %s)" % text)
    return value


def _stop_grace(text: str) -> float:
    """A job's SIGTERM-to-SIGKILL grace, within the spec's bound (a longer wait overflows
    the stop's timer, and SIGKILL is never sent)."""
    from agent.wire.launch_spec import MAXIMUM

    value = _positive_number(text)
    if value > MAXIMUM["stop_grace"]:
        raise argparse.ArgumentTypeError("must be at most %g s, one day (got %s)"
                                         % (MAXIMUM["stop_grace"], text))
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None


def _non_negative_int(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (got %s)" % text)
    return value


def _positive_int(text: str) -> int:
    value = _integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0 (got %s)" % text)
    return value


def _job_name(text: str) -> str:
    """The job id names the folders of its logs and spool, so it must be one folder name."""
    from agent.wire.launch_spec import check_job_name
    from agent.wire.op_error import OpError

    try:
        return check_job_name(text, "job id")
    except OpError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Host agent of the training cockpit: samples GPUs and the "
        "host, journals trainer records, supervises the job, serves the journal.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def state(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", type=Path, default=None,
                       help="journal and control files (default: $COCKPIT_AGENT_STATE_DIR "
                       "or %s)" % paths.DEFAULT_STATE_DIR)

    run = sub.add_parser("run", help="the daemon: sample, journal, supervise "
                         "(`run [options] -- CMD ARGS…` to start a job)")
    state(run)
    run.add_argument("--run-dir", type=Path, action="append", default=[],
                     help="a run dir whose spool/ to tail (repeatable); the first one "
                     "also gets the job's logs/")
    run.add_argument("--interval", type=_positive_interval, default=1.0,
                     help="sampling interval in seconds (default 1.0, minimum 0.25, "
                     "maximum 86400)")
    run.add_argument("--simulate-gpus", type=_non_negative_int, default=0, metavar="N",
                     help="report N simulated GPUs (labelled sim) instead of NVML")
    run.add_argument("--job", type=_job_name, default=None,
                     help="job id for the supervised command")
    run.add_argument("--max-journal-bytes", type=_positive_int, default=None,
                     help="journal size cap (default 2 GiB)")
    run.add_argument("--max-journal-days", type=_positive_number, default=None,
                     help="journal age cap in days (default 14)")
    run.add_argument("--stop-grace", type=_stop_grace, default=10.0,
                     help="seconds between SIGTERM and SIGKILL when stopping the job")
    run.add_argument("--exit-with", type=_positive_int, default=None, metavar="PID",
                     help="stop, with the jobs, once process PID is gone (for a program "
                     "that starts the daemon for itself)")
    run.add_argument("--exit-with-job", action="store_true",
                     help="stop once the `-- CMD` job has exited, with its exit status "
                     "(a batch system's step, e.g. under srun)")

    stream = sub.add_parser("stream", help="journal records after --from on stdout; "
                            "control ops on stdin")
    state(stream)
    stream.add_argument("--from", dest="after", type=_non_negative_int, default=0,
                        metavar="SEQ", help="send records with seq > SEQ (default 0)")

    status = sub.add_parser("status", help="daemon and journal state")
    state(status)
    status.add_argument("--json", action="store_true", help="one JSON object")

    build = sub.add_parser("build-zipapp", help="write the single-file agent.pyz")
    build.add_argument("--out", type=Path, default=Path("agent.pyz"),
                       help="file or directory to write (default ./agent.pyz)")

    sub.add_parser("version", help="agent and protocol version")
    return parser


def _split_command(argv: Sequence[str]) -> tuple:
    argv = list(argv)
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


def _cmd_run(args: argparse.Namespace, cmd: List[str]) -> int:
    from agent.daemon import DaemonConfig, run_daemon
    from agent.journal.journal import DEFAULT_MAX_AGE, DEFAULT_MAX_BYTES

    config = DaemonConfig(
        state_dir=args.state_dir, run_dirs=args.run_dir, interval=args.interval,
        simulate_gpus=args.simulate_gpus, job=args.job, cmd=cmd,
        max_bytes=DEFAULT_MAX_BYTES if args.max_journal_bytes is None
        else args.max_journal_bytes,
        max_age=DEFAULT_MAX_AGE if args.max_journal_days is None
        else args.max_journal_days * 86400.0,
        stop_grace=args.stop_grace, exit_with=args.exit_with,
        exit_with_job=args.exit_with_job)
    return run_daemon(config)


def _cmd_status(args: argparse.Namespace) -> int:
    from agent.journal.journal import JournalReader, list_segments
    from agent.lockfile import running_daemon

    state_dir = args.state_dir
    if not (state_dir / "journal_id").exists():
        raise UsageError("no agent journal in %s (start one with `%s run --state-dir %s`)"
                         % (state_dir, PROG, state_dir))
    reader = JournalReader(state_dir)
    first, head = reader.bounds()
    segments = list_segments(reader.dir)
    size = sum(p.stat().st_size for _, p in segments if p.exists())
    pid = running_daemon(state_dir)
    info = {"state_dir": str(state_dir), "daemon_pid": pid, "daemon": pid is not None,
            "journal_id": reader.journal_id, "first": first, "head": head,
            "segments": len(segments), "bytes": size, "agent_version": __version__}
    if args.json:
        print(json.dumps(info))
    else:
        print("state dir   %s" % state_dir)
        print("daemon      %s" % ("running (pid %s)" % pid if pid is not None else "not running"))
        print("journal     %s: seq %d..%d in %d segment(s), %.1f MiB"
              % (reader.journal_id, first, head, len(segments), size / 1048576.0))
    return 0


def _dispatch(args: argparse.Namespace, cmd: List[str], parser: argparse.ArgumentParser
              ) -> int:
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "version":
        print("cockpit-agent %s (protocol %d, python %s)"
              % (__version__, PROTOCOL_VERSION, sys.version.split()[0]))
        return 0
    if cmd and args.command != "run":
        raise UsageError("only `run` takes a job command after --")
    if args.command == "build-zipapp":
        from agent.zipapp import build_zipapp

        print(build_zipapp(args.out))
        return 0
    if args.state_dir is None:
        args.state_dir = default_state_dir()
    if args.command == "run":
        return _cmd_run(args, cmd)
    if args.command == "stream":
        from agent.journal.stream import run_stream

        return run_stream(args.state_dir, args.after)
    return _cmd_status(args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from agent.journal.journal import JournalError
    from agent.lockfile import LockHeld

    own, cmd = _split_command(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(own)
    try:
        return _dispatch(args, cmd, parser)
    except (UsageError, LockHeld, JournalError, ValueError) as exc:
        print("%s: error: %s" % (PROG, exc), file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as exc:
        print("%s: error: %s" % (PROG, _describe(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return "%s: %s" % (exc.filename, exc.strerror or exc)
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
