"""`cockpit` command line.

Heavy parts (Textual, DuckDB, paramiko) are imported inside the command that needs them,
so `cockpit --help` and `cockpit report` stay fast and the UI is never loaded headless.
Every user-facing failure ends as one clear line on stderr and exit status 2.

Over 500 lines: the argument declarations of every command and the few lines of wiring
each runs. Commands with a family of their own live apart (`ssh_cli`, `slurm_cli`,
`compare_cli`); the recording commands (report, diff, archive, import, export) are the
next seam to move out along.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.wire import ops
from cockpit import __version__
from cockpit.analysis.text import counted, printable
from cockpit.app import compare_cli, ssh_cli
from cockpit.errors import CockpitError

if TYPE_CHECKING:
    from cockpit.read.source import Source
    from cockpit.ui.app import CockpitApp


def _add_theme(p: argparse.ArgumentParser, top_level: bool = False) -> None:
    """--theme and --keymap, accepted before the command (`cockpit --keymap K replay F`)
    and after it. Only the top level has defaults: a command's own copies are SUPPRESSed
    when absent, so they never overwrite what was given before the command."""
    p.add_argument("--theme", default="dark" if top_level else argparse.SUPPRESS,
                   help="dark (default), light or high-contrast")
    p.add_argument("--keymap", type=Path, default=None if top_level else argparse.SUPPRESS,
                   help="TOML file remapping keys")
    p.add_argument("--screenshots", type=_existing_dir, metavar="DIR",
                   default=None if top_level else argparse.SUPPRESS,
                   help="where the command palette's Screenshot saves (default: the "
                        "recording's directory)")


def _existing_dir(text: str) -> Path:
    """A directory that exists: a screenshot is refused at start, not lost at the end."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such directory")
    return path


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
    # Over 80 lines: the top-level options and the short subcommands, declared in the
    # order `cockpit --help` lists them; the longer families have their own `_add_*`.
    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="A terminal cockpit for long-running distributed PyTorch training.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {__version__}")
    _add_theme(parser, top_level=True)
    parser.add_argument("--alerts", type=Path, default=None, metavar="FILE",
                        help="TOML file whose [alerts] table sets alert thresholds "
                        "(cockpit.analysis.alert_config lists them), for every command")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    scaling = sub.add_parser(
        "scaling", help="measured speed-up and efficiency of the example trainer (or of "
        "the recordings given) at several scales")
    scaling.add_argument("recordings", nargs="*", type=Path, metavar="RECORDING",
                         help="read these runs of one workload instead of running it")
    scaling.add_argument("--nproc", type=_count(2), default=2,
                         help="processes of the largest run on this host (default 2)")
    scaling.add_argument("--steps", type=_count(10), default=60,
                         help="training steps of each run (default 60)")
    scaling.add_argument("--dir", type=Path, default=None,
                         help="where to keep the runs (default: a new folder under ./runs)")

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
    demo.add_argument("--set", action="append", default=[], dest="settings", type=_setting,
                      metavar="KEY=VALUE",
                      help="a setting of the example trainer's config "
                      "(examples/charlm/config.toml, e.g. model.n_layer=2), after the "
                      "demo's own; repeatable")
    demo.add_argument("--headless", type=_positive_float, default=None, metavar="SECONDS",
                      help="no UI: record for SECONDS (less when the job finishes "
                      "sooner), then print the report")
    _add_metrics(demo)
    _add_theme(demo)

    watch = sub.add_parser("watch", help="stream agents on hosts over SSH and show the job")
    watch.add_argument("targets", nargs="+", help="an inventory TOML file, or user@host[:port] "
                       "…, or a Slurm job spec (docs/slurm.md)")
    watch.add_argument("--store", type=Path, default=None,
                       help="DuckDB recording to write, appended to when it exists "
                       "(default: a new file, recordings/watch-YYYYmmdd-HHMMSS.duckdb under "
                       "the user data dir, ~/.local/share/training-cockpit)")
    watch.add_argument("--known-hosts", type=Path, default=None)
    watch.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust unknown host keys and remember them (changed keys are "
                            "still refused)")
    ssh_cli.add_ssh_options(watch, known_hosts=False)
    watch.add_argument("--job", type=Path, default=None, metavar="JOB.toml",
                       help="the job spec: makes the job controllable from the UI; a Slurm "
                       "job's is watched through Slurm, its nodes streamed (docs/slurm.md)")
    watch.add_argument("--headless", type=_positive_float, default=None, metavar="SECONDS",
                       help="no UI: record for SECONDS, then print the report")
    _add_metrics(watch)
    watch.add_argument("--archive", default=None, metavar="s3://BUCKET/PREFIX/",
                       help="when the session ends, archive the recording there (see "
                            "docs/archive.md)")
    _add_s3_options(watch)
    watch.add_argument("--keep-raw", type=_raw_window, default=None, metavar="DURATION",
                       help="how long raw GPU and host samples, and the steps of ranks "
                            "other than 0, are kept: older samples are rolled up into "
                            "1-minute min/mean/max rows, older steps live on in the charts "
                            "(default 3d; e.g. 36h, 2w); checked hourly")
    _add_theme(watch)

    _add_run(sub)
    _add_job_commands(sub)
    ssh_cli.add_commands(sub)

    imp = sub.add_parser("import", help="bring TensorBoard runs, JSONL metric logs or wire "
                         "recordings into a recording (see docs/import-export.md)")
    imp.add_argument("paths", type=Path, nargs="+", metavar="PATH")
    imp.add_argument("-o", "--output", type=Path, required=True, metavar="REC.duckdb",
                     help="the recording to write (appended to when it exists)")
    imp.add_argument("--map", action="append", default=[], metavar="NAME=FIELD",
                     help="map a tag or key to a field (loss, val_loss, lr, grad_norm, "
                          "epoch, samples, tokens, step_time, ignore); repeatable")
    imp.add_argument("--job", default=None, help="the job's name (default: the run's)")
    imp.add_argument("--host", default=None, help="the host the records are stored under")

    export = sub.add_parser("export", help="write a recording's tables as Parquet or CSV")
    export.add_argument("file", type=Path, metavar="RECORDING")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    export.add_argument("--what", action="append", default=None, metavar="TABLE[.SERIES]",
                        help="a table (train, eval, gpu, host_sample, event, …) or one "
                             "series of it (train.loss, eval.loss, gpu.temp: the values "
                             "with their host, seq, ts, job, rank, step or gpu); "
                             "repeatable; default: every table")
    export.add_argument("--format", choices=("parquet", "csv"), default="parquet")

    archive = sub.add_parser("archive", help="upload a recording (and optionally its "
                             "checkpoint and a Parquet export) to S3-compatible storage")
    archive.add_argument("file", type=Path, metavar="RECORDING")
    archive.add_argument("url", metavar="s3://BUCKET/PREFIX/")
    archive.add_argument("--checkpoint", type=Path, default=None, metavar="PATH",
                         help="also upload this checkpoint file or directory")
    archive.add_argument("--parquet", action="store_true",
                         help="also upload every table as Parquet")
    _add_s3_options(archive)

    replay = sub.add_parser("replay", help="play a recording in the cockpit")
    replay.add_argument("file", type=_recording_arg, metavar="FILE|s3://…")
    _add_s3_options(replay)
    replay.add_argument("--speed", type=_replay_speed, default=10.0,
                        help="playback speed, 0.25 to 1000 (default 10x)")
    _add_theme(replay)

    report = _add_report(sub)
    report.add_argument("file", type=_recording_arg, metavar="FILE|s3://…")
    report.add_argument("--charts", type=Path, default=None, metavar="DIR",
                        help="also write the loss, LR, throughput and GPU charts to DIR as "
                             "SVG and PNG")
    report.add_argument("--compare", action="append", default=[], metavar="REC[:JOB]",
                        help="also compare this run with REC's job (repeatable; six "
                             "sides at most, this one counted): final and best metrics, "
                             "speed, KPIs and the provenance differences side by side, "
                             "as `cockpit compare` prints them")
    _add_s3_options(report)
    report.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    report.add_argument("--job", metavar="NAME",
                        help="the job to report (default: the one the screen shows at the "
                             "end; the report names the others)")
    report.add_argument("--kpis", action="store_true",
                        help="print the KPIs instead (GPU-hour utilization and lost time by "
                             "cause, MTTR, turnaround, checkpoint overhead, GPU-hours per "
                             "week) of every job; FILE may be a directory: every *.duckdb "
                             "in it, a table per job and the totals")
    report.add_argument("--target-loss", type=float, default=None, metavar="LOSS",
                        help="with --kpis: also the time from launch to the first "
                             "validation loss at or below LOSS")
    _add_report_gate(report)
    diff = sub.add_parser("diff", help="what changed between two runs: code, data, config, "
                                       "environment, seed")
    diff.add_argument("a", metavar="A", help="REC or REC:JOB (a recording, one of its jobs)")
    diff.add_argument("b", metavar="B", nargs="?", default=None,
                      help="REC or REC:JOB (default: A's parent if A is a fork, else the "
                           "earlier run of A's name in the same recording)")
    diff.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    compare_cli.add_command(sub, _add_theme)

    return parser


def _add_report(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from cockpit.analysis.gate import EXIT_CODES_HELP, metrics_help

    return sub.add_parser(
        "report", help="print the four instruments of a recording",
        description="Print the four instruments of a recording, also of one a live cockpit "
        "is writing (read from a copy of what it committed; docs/recordings.md).",
        epilog=f"{EXIT_CODES_HELP} --fail-if metrics: {metrics_help()}.")


def _add_report_gate(report: argparse.ArgumentParser) -> None:
    """`--at` and `--fail-if`: a report as of a step or time, and a CI gate on it."""
    from cockpit.analysis.gate import GateError, parse_at, parse_threshold

    def checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        def run(text: str) -> Any:
            try:
                return parse(text)
            except GateError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return run

    report.add_argument("--at", type=checked(parse_at), default=None, metavar="STEP|TIME",
                        help="report as of a step (when the job first reached it), "
                             "+SECONDS after the recording's start, or an ISO 8601 time "
                             "(local unless it names its zone: 2026-12-03T09:00, "
                             "2026-12-03T09:00:00Z)")
    report.add_argument("--fail-if", type=checked(parse_threshold), action="append",
                        default=[], metavar="'METRIC>NUMBER'",
                        help="exit 5 when this holds (or METRIC is not known), e.g. "
                             "'val_loss>2.0', 'gpu_util<0.5'; operators > >= < <= == !=; "
                             "repeatable; metrics below")


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run", help="run a training command here, under an agent started for it, and "
        "watch it: cockpit run -- python train.py ARGS…",
        description="Start an agent on this machine, launch CMD through it under torchrun "
        "(a job spec built from the command), and watch it. Quitting stops the job. The "
        "run's folder holds the agent's state (agent/), the job's run dir (run/: spool, "
        "logs, control, checkpoints) and the recording.")
    run.add_argument("--job", type=_fork_name, default=None, metavar="NAME",
                     help="job id (default: the script's name, e.g. train)")
    run.add_argument("--dir", type=Path, default=None,
                     help="the run's folder (default: ./runs/JOB-YYYYmmdd-HHMMSS)")
    run.add_argument("--nproc", type=_count(1), default=None, metavar="N",
                     help="training processes (torchrun --nproc-per-node; default 1, or "
                     "the command's own torchrun --nproc-per-node)")
    run.add_argument("--simulate-gpus", type=_count(0), default=0, metavar="N",
                     help="report N simulated GPUs, labelled SIM (default 0: the real ones, "
                     "or none)")
    run.add_argument("--headless", type=_positive_float, default=None, metavar="SECONDS",
                     help="no UI: record for SECONDS (less when the job finishes sooner), "
                     "then print the report")
    _add_theme(run)


def _split_run_command(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """`cockpit [OPTIONS] run [OPTIONS] -- CMD…` as (own arguments, CMD), or None when
    argv is not a `run` with `--`: argparse would read CMD's options as its own."""
    if "--" not in argv:
        return None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _ssh_options(p: argparse.ArgumentParser) -> None:
    ssh_cli.add_ssh_options(p)


def _add_job_commands(sub: argparse._SubParsersAction) -> None:
    """launch / pause / resume / relaunch / fork / adjust / stop / scale JOB.toml."""
    helps = {
        ops.LAUNCH: "start a job (torchrun on every host of its spec)",
        ops.PAUSE: "checkpoint at an agreed step, then stop: no job process left on the GPUs",
        ops.RESUME: "start a paused or stopped job again from its newest valid checkpoint",
        ops.RELAUNCH: "stop now and start again from the newest valid checkpoint",
        ops.FORK: "copy the newest checkpoint to a new run dir and start a new job from it",
        ops.ADJUST: "change LR scale or a knob, or ask for a checkpoint or eval, without "
                    "restart",
        ops.STOP: "stop a job (SIGTERM, then SIGKILL); no automatic restart",
        ops.SCALE: "add or remove a host of an elastic job; the others keep running",
    }
    for action, text in helps.items():
        p = sub.add_parser(action, help=text)
        p.add_argument("job", type=Path, metavar="JOB.toml", help="the job spec")
        p.add_argument("--inventory", type=Path, default=None,
                       help="hosts file (without it, a host named 'local' is this machine)")
        p.add_argument("--store", type=Path, default=None,
                       help="recording to write, appended to when it exists (default: a "
                       "new file per command, recordings/job-NAME-YYYYmmdd-HHMMSS.duckdb "
                       "under the user data dir, ~/.local/share/training-cockpit)")
        p.add_argument("--connect-timeout", type=_positive_float, default=60.0,
                       metavar="SECONDS", help="how long to wait for the hosts to connect "
                       "(default 60)")
        p.add_argument("--ack-timeout", type=_positive_float, default=120.0,
                       metavar="SECONDS", help="how long to wait for each host's answer "
                       "(default 120)")
        _ssh_options(p)
        if action == ops.LAUNCH:
            p.add_argument("--no-check", action="store_true",
                           help="skip the pre-flight check (`cockpit check`) run first")
        if action not in (ops.LAUNCH, ops.FORK):
            p.add_argument("--fork-of-job", dest="target", metavar="FORK", default=None,
                           help="act on this fork of the spec's job (as `cockpit fork` "
                                "named it: JOB-fork-…), which has no spec file of its own")
        if action == ops.PAUSE:
            p.add_argument("--freeze", action="store_true",
                           help="SIGSTOP the processes instead (GPU memory stays allocated)")
            p.add_argument("--hold", type=_positive_float, default=60.0,
                           help="seconds a freeze may last before the job is thawed")
        if action == ops.RELAUNCH:
            p.add_argument("--exclude", action="append", default=[], metavar="HOST")
        if action == ops.FORK:
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           dest="overrides", help="hyper-parameter override for the fork")
            p.add_argument("--name", type=_fork_name, default=None)
            p.add_argument("--step", type=_count(0), default=None,
                           help="checkpoint step to fork from (default: newest valid)")
        if action == ops.ADJUST:
            p.add_argument("--lr-scale", type=_lr_scale, default=None)
            p.add_argument("--checkpoint-now", action="store_true")
            p.add_argument("--eval-now", action="store_true")
            p.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE")
        if action == ops.STOP:
            p.add_argument("--grace", type=_positive_float, default=None)
        if action == ops.SCALE:
            which = p.add_mutually_exclusive_group(required=True)
            which.add_argument("--add", metavar="HOST", default=None,
                               help="inventory host that joins (starts torchrun there)")
            which.add_argument("--remove", metavar="HOST", default=None,
                               help="host of the job that leaves (its part is stopped)")


_SETTING = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*=\S*")


def _setting(text: str) -> str:
    """`--set` of a trainer's config: a dotted key and a value without spaces, as the
    trainer's own `--set` takes it (the trainer checks the key and the value)."""
    if not _SETTING.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. model.n_layer=2), "
                                         f"got {text!r}")
    return text


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
    from cockpit.app.operations import run_operation

    options = ssh_cli.link_options(args)
    from cockpit.app.slurm_cli import slurm_operation

    # A spec whose [launcher] is Slurm goes through sbatch/scancel (docs/slurm.md).
    done = slurm_operation(args.command, args.job, args.inventory, args.store, options,
                           timeout=args.ack_timeout,
                           exclude=tuple(getattr(args, "exclude", ())))
    if done is not None:
        return done
    if args.command == ops.LAUNCH and not args.no_check:
        ssh_cli.preflight_launch(args, options)
    kw: dict[str, Any] = {}
    if args.command == ops.PAUSE:
        kw = {"freeze": args.freeze, "hold": args.hold}
    elif args.command == ops.RELAUNCH:
        kw = {"exclude": tuple(args.exclude)}
    elif args.command == ops.FORK:
        kw = {"overrides": _pairs(args.overrides, "--set"), "name": args.name,
              "step": args.step}
    elif args.command == ops.ADJUST:
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
    elif args.command == ops.STOP:
        kw = {"grace": args.grace}
    elif args.command == ops.SCALE:
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
        return make_app(source, theme=args.theme, keymap_path=args.keymap,
                        screenshot_dir=getattr(args, "screenshots", None))


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


def _cmd_scaling(args: argparse.Namespace) -> int:
    from cockpit.app import scaling

    if args.recordings:
        measures = [scaling.measure(path) for path in args.recordings]
    else:
        import time

        root = args.dir or Path.cwd() / "runs" / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}"
        measures = scaling.run_sizes(root, [1, args.nproc], args.steps)
        print(f"runs and their recordings in {root}")
    print(scaling.render(scaling.compare(measures)), end="")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from cockpit.app.demo import DEMO_RUNS_KEPT, DemoRun

    _check_ui_options(args)

    fault_at = default_fault_step(args.steps) if args.fault_at is None else args.fault_at
    with DemoRun(
        run_root=args.dir, steps=args.steps, nproc=args.nproc, simulate_gpus=args.simulate_gpus,
        fault_at=fault_at, settings=args.settings,
    ) as demo:
        print(f"demo run in {demo.run_root}", file=sys.stderr)
        if demo.pruned:
            print(f"removed {counted(len(demo.pruned), 'older demo run')} from "
                  f"{demo.run_root.parent}, keeping the newest {DEMO_RUNS_KEPT}",
                  file=sys.stderr)
        with _metrics_server(demo.session, args.metrics):
            _watch_or_record(demo, args)
    session = demo.session
    return _after_live(demo.store_path, args,
                       session.link_problems() if session is not None else {},
                       session.store_problem() if session is not None else None)


def _cmd_run(args: argparse.Namespace) -> int:
    from cockpit.app.local_run import CommandRun

    _check_ui_options(args)
    command = getattr(args, "run_command", None)
    if not command:
        raise CockpitError("run: give the command after --, e.g. "
                           "`cockpit run -- python train.py`")
    with CommandRun(command, run_root=args.dir, job=args.job, nproc=args.nproc,
                    simulate_gpus=args.simulate_gpus) as run:
        print(f"run {run.job} in {run.run_root}: {counted(run.nproc, 'process', 'processes')} of "
              f"{' '.join(command)}", file=sys.stderr)
        _watch_or_record(run, args)
    session = run.session
    return _after_live(run.store_path, args,
                       session.link_problems() if session is not None else {},
                       session.store_problem() if session is not None else None)


def _cmd_watch(args: argparse.Namespace) -> int:
    from cockpit.app.watch import open_watch

    _check_ui_options(args)
    if args.metrics is not None:
        from cockpit.export.server import parse_listen

        parse_listen(args.metrics)  # a bad address is refused before anything starts
    if args.archive is not None:  # so is a bad URL or missing credentials
        from cockpit.archive import s3

        s3.parse_url(args.archive)
        s3.client(_s3_options(args))

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
        options=ssh_cli.link_options(args),
    ) as live, _metrics_server(live, args.metrics):
        _watch_or_record(live, args)
    code = _after_live(live.store_path, args, live.link_problems(), live.store_problem())
    if args.archive is not None:
        _archive_after(live.store_path, args)
    return code


def _archive_after(store_path: Path, args: argparse.Namespace) -> None:
    """`watch --archive`: the recording, closed now, to object storage."""
    from cockpit.archive.progress import ByteProgress
    from cockpit.archive.recordings import archive

    result = archive(store_path, args.archive, _s3_options(args), progress=ByteProgress)
    print(f"archived: {result.manifest}", file=sys.stderr)


@contextlib.contextmanager
def _metrics_server(live: Any, listen: str | None) -> Iterator[None]:
    """`--metrics`: the exporter over the live session's store, for as long as it runs."""
    if listen is None:
        yield
        return
    from cockpit.export.server import MetricsServer, parse_listen, store_snapshots

    address = parse_listen(listen)
    build, kpis = store_snapshots(live.store, lambda: {
        name: st.shown()[0] for name, st in live.fleet.status().items()})
    with MetricsServer(address, build, kpis=kpis) as server:
        print(f"metrics: http://{server.host}:{server.port}/metrics", file=sys.stderr)
        yield


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
    from cockpit.read.report import render_report

    print(render_report(store_path, fmt="text"))
    for host, problem in problems.items():
        # The problem quotes the host: its agent's stderr, its SSH server's banner.
        print(f"cockpit: host {printable(host)}: link {printable(problem, multiline=True)}",
              file=sys.stderr)
    if store_problem is not None:
        print(f"cockpit: {printable(store_problem, multiline=True)}", file=sys.stderr)
    return 1 if problems or store_problem is not None else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from cockpit.sessions.replay import ReplaySource

    with _readable_recording(args) as (path, _name):
        source = ReplaySource(path, speed=args.speed)
        if getattr(args, "screenshots", None) is None and isinstance(args.file, Path):
            # Next to the recording itself, not the reader's copy of a live one.
            args.screenshots = args.file.parent
        try:
            app = _build_app(source, args)
        except CockpitError:
            source.stop()
            raise
        discard_typeahead()
        app.run()
    return 0


def _add_metrics(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", default=None, metavar="[ADDR:]PORT",
                   help="serve Prometheus/OpenMetrics metrics of every job, host and GPU at "
                        "http://ADDR:PORT/metrics (ADDR defaults to 127.0.0.1; see "
                        "docs/metrics.md)")


def _recording_arg(text: str) -> str | Path:
    """A recording: a local file, or an archived one at `s3://…` (kept as the URL: a
    Path would fold its `//`)."""
    return text if text.startswith("s3://") else Path(text)


def _add_s3_options(p: argparse.ArgumentParser) -> None:
    """Where object storage is; credentials come only from the standard AWS chain."""
    g = p.add_argument_group("object storage (s3:// URLs; credentials from AWS_* variables, "
                             "~/.aws/credentials or --profile)")
    g.add_argument("--endpoint-url", default=None, metavar="URL",
                   help="an S3-compatible server (default: AWS_ENDPOINT_URL, else AWS)")
    g.add_argument("--region", default=None)
    g.add_argument("--path-style", action="store_true",
                   help="address buckets as ENDPOINT/BUCKET (most self-hosted servers)")
    g.add_argument("--profile", default=None, help="a profile of ~/.aws/config")


def _s3_options(args: argparse.Namespace) -> Any:
    from cockpit.archive.s3 import S3Options

    return S3Options(endpoint_url=args.endpoint_url, region=args.region,
                     path_style=args.path_style, profile=args.profile)


def _local_recording(args: argparse.Namespace) -> Path:
    """`args.file`, downloaded (once, verified, cached) when it is an s3:// URL."""
    if isinstance(args.file, Path):
        _require_file(args.file)
        return args.file
    from cockpit.archive.progress import ByteProgress
    from cockpit.archive.recordings import fetch

    return fetch(args.file, _s3_options(args), progress=ByteProgress)


def _cmd_archive(args: argparse.Namespace) -> int:
    from cockpit.archive.progress import ByteProgress
    from cockpit.archive.recordings import archive

    result = archive(args.file, args.url, _s3_options(args), checkpoint=args.checkpoint,
                     parquet=args.parquet, progress=ByteProgress)
    print(f"archived {len(result.objects)} object(s), {result.total_bytes} bytes "
          f"({result.sent_bytes} sent now), each checked after upload: {result.manifest}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    """Each input's summary on stdout; on stderr, what stopped an input being read to
    its end (a compressed file cut short, an event file's unreadable tail). An input read
    only in part fails the command (exit 1) after what was read is stored, as a headless
    run whose hosts did not all deliver does; so does an import that wrote nothing."""
    from cockpit.archive.progress import ByteProgress
    from cockpit.importers.mapping import MappingError, parse_overrides
    from cockpit.importers.sources import import_paths
    from cockpit.importers.summary import summary_lines

    try:
        overrides = parse_overrides(args.map)
    except MappingError as exc:
        raise CockpitError(str(exc)) from None
    done = import_paths(args.paths, args.output, overrides=overrides, job=args.job,
                        host=args.host, progress=ByteProgress)
    for item in done:
        for line in summary_lines(item):
            print(printable(line))
    problems = [problem for item in done for problem in item.counts.problems]
    for problem in problems:
        print(f"cockpit: {printable(problem)}", file=sys.stderr)
    if not any(item.counts.sent for item in done):
        print(f"cockpit: no metrics found: nothing written to {printable(args.output)}",
              file=sys.stderr)
        return 1
    _print_recording_hint(args.output)
    return 1 if problems else 0


def _cmd_export(args: argparse.Namespace) -> int:
    from cockpit.store.export import export_tables

    _require_file(args.file)
    try:
        files = export_tables(args.file, args.output, args.format, args.what)
    except ValueError as exc:
        raise CockpitError(f"export: {exc}") from None
    for f in files:
        print(f)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from cockpit.read.diff_report import render_diff

    print(render_diff(args.a, args.b, fmt=args.format), end="")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from cockpit.analysis.gate import verdict
    from cockpit.read.report import format_report, report_data

    if args.kpis:  # FILE may be a directory of recordings here
        from cockpit.read.kpis_report import render_kpis

        where = args.file if isinstance(args.file, Path) else _local_recording(args)
        print(render_kpis(where, fmt=args.format, job=args.job,
                          target_loss=args.target_loss), end="")
        return 0
    at = args.at
    with _readable_recording(args) as (path, name):
        data = report_data(path, at.ts if at is not None else None, args.job, name=name,
                           at_step=at.step if at is not None else None,
                           at_offset=at.offset if at is not None else None)
        compared = _compare_section(args, path) if args.compare else None
        if compared is not None and args.format == "json":
            data = {**data, "compare": compared[1]}
        print(format_report(data, args.format))
        if compared is not None and args.format != "json":
            print("\n" + compared[0], end="")
        if args.charts is not None:
            from cockpit.export.charts import charts_of

            written = charts_of(path, args.charts, job=args.job)
            print(f"charts: {', '.join(str(p) for p in written)}", file=sys.stderr)
    # The verdict, for a CI job to gate on (`cockpit.analysis.gate`; --help's epilog).
    code, reasons = verdict(data, args.fail_if)
    for why in reasons:
        print(f"cockpit: {printable(why)}", file=sys.stderr)
    return code


def _compare_section(args: argparse.Namespace, readable: Path) -> tuple[str, Any]:
    """`report --compare`: this recording's job (the one reported) against each
    `--compare` side, as text or Markdown, and as data for the JSON report."""
    from cockpit.read.compare import as_data, render_comparison

    # Without --job, the side names the recording alone: compare then takes the job the
    # report shows (the one that trained last, else the one it declared).
    first = f"{readable}:{args.job}" if args.job else str(readable)
    comparison, _folder = compare_cli.comparison_of([first, *args.compare])
    return render_comparison(comparison, args.format), as_data(comparison)


@contextlib.contextmanager
def _readable_recording(args: argparse.Namespace) -> Iterator[tuple[Path, str]]:
    """(the file to open read-only, the recording's name): `args.file` (downloaded
    when it is an s3:// URL), or, while a live cockpit writes it, that cockpit's copy of
    what it has committed (docs/recordings.md), removed afterwards."""
    from cockpit.store.live_socket import LiveSnapshotError, readable_recording

    path = _local_recording(args)
    with contextlib.ExitStack() as stack:
        try:
            readable, is_copy = stack.enter_context(readable_recording(path))
        except LiveSnapshotError as exc:
            raise CockpitError(str(exc)) from None
        if is_copy:
            print(f"{path} is being written by a live cockpit: reading a copy of what it "
                  "had committed just now", file=sys.stderr)
        yield readable, str(path)


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
    **{action: _cmd_job for action in ops.JOB_OPERATIONS},
    "demo": _cmd_demo,
    "scaling": _cmd_scaling,
    "run": _cmd_run,
    "watch": _cmd_watch,
    "replay": _cmd_replay,
    "report": _cmd_report,
    "diff": _cmd_diff,
    "compare": lambda args: compare_cli.cmd_compare(args, discard_typeahead),
    "archive": _cmd_archive,
    "import": _cmd_import,
    "export": _cmd_export,
    "check": ssh_cli.cmd_check,
    "hosts": ssh_cli.cmd_hosts,
}


def end_on_hangup() -> None:
    """A closed terminal or SSH session (SIGHUP) and a plain `kill` (SIGTERM) end the
    cockpit as ctrl-c does, through every cleanup on the way out: the recording's last
    records are committed, and the demo's agent and training processes are stopped
    (left to the default action they would run on, for days, with nobody watching)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (a caller embedding the CLI)
    ending = (signal.SIGHUP, signal.SIGTERM)
    for signum in ending:
        signal.signal(signum, _ended_by)
    # A parent that blocked them (some supervisors and CI runners do) passes the block
    # on through exec: the signal would then wait, pending, for days.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, ending)


class EndedBySignal(KeyboardInterrupt):
    """Unwinds like ctrl-c (Textual and every `with` let it through), then exits with
    the status a shell gives a process ended by the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


_ENDED_BY: list[int] = []  # the signal that ended this process, once one has
# How long the way out may take once a signal ends the cockpit: the demo's jobs get
# their stop grace (10 s by default) and the recording its last commit. Past it the
# process exits at once: a library's clean-up can hang (DuckDB's cancelling of an
# interrupted query has been seen to wait forever), and a closed SSH session must not
# leave a cockpit running for days.
ENDING_GRACE_S = 30.0


def _ended_by(signum: int, _frame: object) -> None:
    if not _ENDED_BY:
        watchdog = threading.Timer(ENDING_GRACE_S, _exit_now, (128 + signum,))
        watchdog.daemon = True
        watchdog.start()
    _ENDED_BY.append(signum)
    raise EndedBySignal(signum)


def _exit_now(status: int) -> None:
    print(f"cockpit: still ending {ENDING_GRACE_S:g} s after the signal; exiting now",
          file=sys.stderr, flush=True)
    os._exit(status)


def _ending_status() -> int | None:
    """The exit status for a process a signal is ending, whatever the exception that
    reached the top: a signal that lands while DuckDB runs a query on this thread
    surfaces as the client's own `RuntimeError("Query interrupted")`, not as ours."""
    return 128 + _ENDED_BY[0] if _ENDED_BY else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    split = _split_run_command(argv)
    args = parser.parse_args(split[0] if split is not None else argv)
    if split is not None and args.command == "run":
        args.run_command = split[1]
    elif split is not None:
        args = parser.parse_args(argv)  # another command's own `--`: as before
    if not args.command:
        parser.print_help()
        return 0
    end_on_hangup()
    if args.alerts is not None:
        from cockpit.analysis.alert_config import AlertConfigError, configure, load_alert_config

        try:
            configure(load_alert_config(args.alerts))
        except AlertConfigError as exc:
            print(f"cockpit: {printable(exc, multiline=True)}", file=sys.stderr)
            return 2
    try:
        return COMMANDS[args.command](args)
    except CockpitError as exc:
        status = _ending_status()
        if status is not None:
            return status  # the error is the signal's doing: a query it interrupted
        # Its message may quote a host, a recording, a config file or an SSH server:
        # shown as text, whatever built it (multi-line messages keep their lines).
        print(f"cockpit: {printable(exc, multiline=True)}", file=sys.stderr)
        return 2
    except EndedBySignal as ended:
        return ended.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and the like: not an error worth a traceback.
        sys.stderr.close()
        return 0
    except Exception:
        status = _ending_status()
        if status is None:
            raise
        return status


if __name__ == "__main__":
    sys.exit(main())
