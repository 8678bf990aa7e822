"""`cockpit` command line.

Heavy parts (Textual, DuckDB, paramiko) are imported inside the command that needs them,
so `cockpit --help` and `cockpit report` stay fast and the UI is never loaded headless.
Every user-facing failure ends as one clear line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit import __version__
from cockpit.analysis.text import counted
from cockpit.errors import CockpitError

if TYPE_CHECKING:
    from cockpit.source import Source
    from cockpit.ui.app import CockpitApp


def _add_theme(p: argparse.ArgumentParser, top_level: bool = False) -> None:
    """--theme and --keymap, accepted before the command (`cockpit --keymap K replay F`)
    and after it. Only the top level has defaults: a command's own copies are SUPPRESSed
    when absent, so they never overwrite what was given before the command."""
    p.add_argument("--theme", default="dark" if top_level else argparse.SUPPRESS,
                   help="dark (default), light or high-contrast")
    p.add_argument("--keymap", type=Path, default=None if top_level else argparse.SUPPRESS,
                   help="TOML file remapping keys")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value
    return parse


def _lr_scale(text: str) -> float:
    from cockpit.control.controller import ControlError, check_lr_scale

    try:
        return check_lr_scale(_positive_float(text))
    except ControlError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("lr_scale ")) from None


def _fork_name(text: str) -> str:
    from cockpit.control.jobspec import name_problem

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _replay_speed(text: str) -> float:
    from cockpit.ui.replay_actions import SPEEDS

    value = _positive_float(text)
    if not SPEEDS[0] <= value <= SPEEDS[-1]:
        raise argparse.ArgumentTypeError(
            f"{text!r} is outside {SPEEDS[0]:g} to {SPEEDS[-1]:g}, the speeds `<` and `>` "
            "step through")
    return value


_WINDOW_UNITS = {"m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def _raw_window(text: str) -> float:
    """A retention window such as 7d, 36h or 90m, in seconds.

    At least a minute: older samples are rolled up into 1-minute rows, so a shorter
    window would fold the minute still being recorded.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a number and a unit (m, h, d or w), "
            "e.g. 7d, 36h or 90m")
    seconds = float(match[1]) * _WINDOW_UNITS[match[2]]
    if seconds < 60:
        raise argparse.ArgumentTypeError(f"{text!r} is under a minute")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="A terminal cockpit for long-running distributed PyTorch training.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {__version__}")
    _add_theme(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo", help="train the example model here under torchrun and watch it live"
    )
    demo.add_argument("--dir", type=Path, default=None, help="where to keep the demo run")
    demo.add_argument("--steps", type=_count(1), default=3000,
                      help="training steps (default 3000)")
    demo.add_argument("--nproc", type=_count(1), default=2, help="ranks (default 2)")
    demo.add_argument("--fault-at", type=_count(0), default=None, metavar="STEP",
                      help="kill rank 1 with SIGKILL at this step, once, as a host's OOM "
                      "killer would, to watch the agent recover the job from its newest "
                      "checkpoint (default: about 40%% of --steps, between two "
                      "checkpoints, so some steps are trained again; 0: never)")
    demo.add_argument(
        "--simulate-gpus", type=_count(0), default=None,
        help="simulated GPUs (labelled SIM); default: 2 when no NVIDIA driver is found",
    )
    demo.add_argument("--headless", type=_positive_float, default=None, metavar="SECONDS",
                      help="no UI: record for SECONDS (less when the job finishes "
                      "sooner), then print the report")
    _add_theme(demo)

    watch = sub.add_parser("watch", help="stream agents on hosts over SSH and show the job")
    watch.add_argument("targets", nargs="+", help="an inventory TOML file, or user@host[:port] …")
    watch.add_argument("--store", type=Path, default=None, help="DuckDB recording to write")
    watch.add_argument("--known-hosts", type=Path, default=None)
    watch.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust unknown host keys and remember them (changed keys are "
                            "still refused)")
    watch.add_argument("--job", type=Path, default=None, metavar="JOB.toml",
                       help="the job spec: makes the job controllable from the UI")
    watch.add_argument("--headless", type=_positive_float, default=None, metavar="SECONDS",
                       help="no UI: record for SECONDS, then print the report")
    watch.add_argument("--keep-raw", type=_raw_window, default=None, metavar="DURATION",
                       help="how long raw GPU and host samples, and the steps of ranks "
                            "other than 0, are kept: older samples are rolled up into "
                            "1-minute min/mean/max rows, older steps live on in the charts "
                            "(default 3d; e.g. 36h, 2w); checked hourly")
    _add_theme(watch)

    _add_job_commands(sub)

    replay = sub.add_parser("replay", help="play a recording in the cockpit")
    replay.add_argument("file", type=Path)
    replay.add_argument("--speed", type=_replay_speed, default=10.0,
                        help="playback speed, 0.25 to 1000 (default 10x)")
    _add_theme(replay)

    report = sub.add_parser("report", help="print the four instruments of a recording")
    report.add_argument("file", type=Path)
    report.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    report.add_argument("--job", metavar="NAME",
                        help="the job to report (default: the one the screen shows at the "
                             "end; the report names the others)")

    return parser


def _ssh_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--known-hosts", type=Path, default=None)
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="trust unknown host keys and remember them (changed keys are still "
                        "refused)")


def _add_job_commands(sub: argparse._SubParsersAction) -> None:
    """launch / pause / resume / relaunch / fork / adjust / stop / scale JOB.toml."""
    helps = {
        "launch": "start a job (torchrun on every host of its spec)",
        "pause": "checkpoint at an agreed step, then stop: no job process left on the GPUs",
        "resume": "start a paused or stopped job again from its newest valid checkpoint",
        "relaunch": "stop now and start again from the newest valid checkpoint",
        "fork": "copy the newest checkpoint to a new run dir and start a new job from it",
        "adjust": "change LR scale or a knob, or ask for a checkpoint or eval, without restart",
        "stop": "stop a job (SIGTERM, then SIGKILL); no automatic restart",
        "scale": "add or remove a host of an elastic job; the others keep running",
    }
    for action, text in helps.items():
        p = sub.add_parser(action, help=text)
        p.add_argument("job", type=Path, metavar="JOB.toml", help="the job spec")
        p.add_argument("--inventory", type=Path, default=None,
                       help="hosts file (without it, a host named 'local' is this machine)")
        p.add_argument("--store", type=Path, default=None,
                       help="recording to append to (default: one per job)")
        p.add_argument("--connect-timeout", type=_positive_float, default=60.0,
                       metavar="SECONDS", help="how long to wait for the hosts to connect "
                       "(default 60)")
        p.add_argument("--ack-timeout", type=_positive_float, default=120.0,
                       metavar="SECONDS", help="how long to wait for each host's answer "
                       "(default 120)")
        _ssh_options(p)
        if action not in ("launch", "fork"):
            p.add_argument("--fork-of-job", dest="target", metavar="FORK", default=None,
                           help="act on this fork of the spec's job (as `cockpit fork` "
                                "named it: JOB-fork-…), which has no spec file of its own")
        if action == "pause":
            p.add_argument("--freeze", action="store_true",
                           help="SIGSTOP the processes instead (GPU memory stays allocated)")
            p.add_argument("--hold", type=_positive_float, default=60.0,
                           help="seconds a freeze may last before the job is thawed")
        if action == "relaunch":
            p.add_argument("--exclude", action="append", default=[], metavar="HOST")
        if action == "fork":
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           dest="overrides", help="hyper-parameter override for the fork")
            p.add_argument("--name", type=_fork_name, default=None)
            p.add_argument("--step", type=_count(0), default=None,
                           help="checkpoint step to fork from (default: newest valid)")
        if action == "adjust":
            p.add_argument("--lr-scale", type=_lr_scale, default=None)
            p.add_argument("--checkpoint-now", action="store_true")
            p.add_argument("--eval-now", action="store_true")
            p.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE")
        if action == "stop":
            p.add_argument("--grace", type=_positive_float, default=None)
        if action == "scale":
            which = p.add_mutually_exclusive_group(required=True)
            which.add_argument("--add", metavar="HOST", default=None,
                               help="inventory host that joins (starts torchrun there)")
            which.add_argument("--remove", metavar="HOST", default=None,
                               help="host of the job that leaves (its part is stopped)")


def _pairs(items: list[str], what: str) -> dict[str, object]:
    from cockpit.control.controller import ControlError, check_finite

    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CockpitError(f"{what} {item!r}: expected KEY=VALUE")
        out[key] = _scalar(value)
    try:  # before any host is dialled
        check_finite(what, out)
    except ControlError as exc:
        raise CockpitError(str(exc)) from None
    return out


def _scalar(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _cmd_job(args: argparse.Namespace) -> int:
    from cockpit.control.operations import run_operation
    from cockpit.transport.host_keys import KnownHosts
    from cockpit.transport.link import LinkOptions

    extra = [args.known_hosts] if args.known_hosts else []
    options = LinkOptions(known_hosts=KnownHosts(extra_files=extra,
                                                 accept_new=args.accept_new_host_keys))
    kw: dict[str, object] = {}
    if args.command == "pause":
        kw = {"freeze": args.freeze, "hold": args.hold}
    elif args.command == "relaunch":
        kw = {"exclude": tuple(args.exclude)}
    elif args.command == "fork":
        kw = {"overrides": _pairs(args.overrides, "--set"), "name": args.name,
              "step": args.step}
    elif args.command == "adjust":
        knobs = _pairs(args.knob, "--knob")
        if args.lr_scale is not None:
            knobs["lr_scale"] = args.lr_scale
        if args.checkpoint_now:
            knobs["checkpoint_now"] = True
        if args.eval_now:
            knobs["eval_now"] = True
        if not knobs:
            raise CockpitError("adjust: give --lr-scale, --checkpoint-now, --eval-now or --knob")
        kw = {"knobs": knobs}
    elif args.command == "stop":
        kw = {"grace": args.grace}
    elif args.command == "scale":
        kw = {"add": args.add, "remove": args.remove}
    target = getattr(args, "target", None)
    if target is not None:
        kw["target"] = target
    return run_operation(args.command, args.job, inventory_path=args.inventory,
                         store_path=args.store, options=options,
                         connect_timeout=args.connect_timeout, ack_timeout=args.ack_timeout,
                         **kw)


def _build_app(source: Source, args: argparse.Namespace) -> CockpitApp:
    from cockpit.ui.app_factory import make_app

    with _ui_errors():
        return make_app(source, theme=args.theme, keymap_path=args.keymap)


def _check_ui_options(args: argparse.Namespace) -> None:
    """Theme and keymap checked before a demo starts training or hosts are dialled:
    with --headless there is no UI, and they are not read."""
    if args.headless is not None:
        return
    from cockpit.ui.app_factory import ui_options

    with _ui_errors():
        ui_options(theme=args.theme, keymap_path=args.keymap)


@contextlib.contextmanager
def _ui_errors() -> Iterator[None]:
    from cockpit.ui.keymap import KeymapError
    from cockpit.ui.themes import ThemeError

    try:
        yield
    except (KeymapError, ThemeError) as exc:
        raise CockpitError(str(exc)) from None


def discard_typeahead(stream: Any = None) -> None:
    """Drop keys typed before the app shows: while the demo prepared or hosts connected
    they were echoed and ignored, and an app reading them later would act on them (a `q`
    quits at once, a `p` pauses the job the operator has not seen yet)."""
    stream = sys.stdin if stream is None else stream
    try:
        if stream is not None and stream.isatty():
            termios.tcflush(stream.fileno(), termios.TCIFLUSH)
    except (OSError, ValueError, termios.error):
        pass  # not a terminal after all (closed, redirected): nothing was typed ahead


def _run_app(source: Source, args: argparse.Namespace) -> None:
    app = _build_app(source, args)
    discard_typeahead()
    app.run()


def default_fault_step(steps: int) -> int:
    """Where the demo's rehearsed crash comes: 40% in, halfway between two of the example
    trainer's checkpoints (every 100 steps), so the recovery has steps to train again;
    0 (never) for a run too short to show one."""
    step = steps * 2 // 5 // 100 * 100 + 50
    return step if step < steps else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from cockpit.demo import DEMO_RUNS_KEPT, DemoRun

    _check_ui_options(args)

    fault_at = default_fault_step(args.steps) if args.fault_at is None else args.fault_at
    with DemoRun(
        run_root=args.dir, steps=args.steps, nproc=args.nproc, simulate_gpus=args.simulate_gpus,
        fault_at=fault_at,
    ) as demo:
        print(f"demo run in {demo.run_root}", file=sys.stderr)
        if demo.pruned:
            print(f"removed {counted(len(demo.pruned), 'older demo run')} from "
                  f"{demo.run_root.parent}, keeping the newest {DEMO_RUNS_KEPT}",
                  file=sys.stderr)
        _watch_or_record(demo, args)
    session = demo.session
    return _after_live(demo.store_path, args,
                       session.link_problems() if session is not None else {},
                       session.store_problem() if session is not None else None)


def _cmd_watch(args: argparse.Namespace) -> int:
    from cockpit.live import open_watch

    _check_ui_options(args)

    if args.store is not None and args.store.is_file():
        # Continuing a recording is how a restarted cockpit resumes each host's stream
        # where it stopped; into another run's recording it mixes two runs. Say which.
        print(f"appending to the existing recording {args.store} (its hosts resume from "
              "their stored high-water marks; pass a new --store to start a new one)",
              file=sys.stderr)

    with open_watch(
        args.targets,
        store_path=args.store,
        known_hosts=args.known_hosts,
        accept_new_host_keys=args.accept_new_host_keys,
        job_path=args.job,
        raw_window=args.keep_raw,
    ) as live:
        _watch_or_record(live, args)
    return _after_live(live.store_path, args, live.link_problems(), live.store_problem())


def _watch_or_record(run: Any, args: argparse.Namespace) -> None:
    """The UI on a live run, or (--headless) a recording of it without one."""
    if args.headless is not None:
        run.record_for(args.headless)
    else:
        _run_app(run.source, args)


def _after_live(store_path: Path, args: argparse.Namespace,
                problems: dict[str, str], store_problem: str | None = None) -> int:
    """The recording's name, and with --headless its report; a headless run whose
    hosts did not all deliver, or whose recording did not take all they sent, fails
    (exit 1) and says why, on stderr."""
    _print_recording_hint(store_path)
    if args.headless is None:
        return 0
    from cockpit.report import render_report

    print(render_report(store_path, fmt="text"))
    for host, problem in problems.items():
        print(f"cockpit: host {host}: link {problem}", file=sys.stderr)
    if store_problem is not None:
        print(f"cockpit: {store_problem}", file=sys.stderr)
    return 1 if problems or store_problem is not None else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from cockpit.replay import ReplaySource

    _require_file(args.file)
    source = ReplaySource(args.file, speed=args.speed)
    try:
        app = _build_app(source, args)
    except CockpitError:
        source.stop()
        raise
    discard_typeahead()
    app.run()
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from cockpit.report import render_report

    _require_file(args.file)
    print(render_report(args.file, fmt=args.format, job=args.job))
    return 0


def _require_file(path: Path) -> None:
    if path.is_dir():
        raise CockpitError(f"{path} is a directory: give the recording file in it (a "
                           "*.duckdb file, e.g. DIR/recording.duckdb)")
    if not path.is_file():
        raise CockpitError(f"{path}: no such recording (expected a DuckDB file)")


def _print_recording_hint(path: Path) -> None:
    print(f"recording: {path}\n  replay: cockpit replay {path}\n  report: cockpit report {path}",
          file=sys.stderr)


COMMANDS = {
    **{action: _cmd_job for action in
       ("launch", "pause", "resume", "relaunch", "fork", "adjust", "stop", "scale")},
    "demo": _cmd_demo,
    "watch": _cmd_watch,
    "replay": _cmd_replay,
    "report": _cmd_report,
}


def end_on_hangup() -> None:
    """A closed terminal or SSH session (SIGHUP) and a plain `kill` (SIGTERM) end the
    cockpit as ctrl-c does, through every cleanup on the way out: the recording's last
    records are committed, and the demo's agent and training processes are stopped
    (left to the default action they would run on, for days, with nobody watching)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a caller embedding the CLI)
    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, _ended_by)


class EndedBySignal(KeyboardInterrupt):
    """Unwinds like ctrl-c (Textual and every `with` let it through), then exits with
    the status a shell gives a process ended by the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


def _ended_by(signum: int, _frame: object) -> None:
    raise EndedBySignal(signum)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    end_on_hangup()
    try:
        return COMMANDS[args.command](args)
    except CockpitError as exc:
        print(f"cockpit: {exc}", file=sys.stderr)
        return 2
    except EndedBySignal as ended:
        return ended.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
