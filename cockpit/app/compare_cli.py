"""`cockpit compare A B [C…]`: jobs of one or several recordings side by side, in the
terminal (the compare screen) or, with `--format`, as text, Markdown or JSON.

The comparison itself is `cockpit.read.compare`; here the sides are checked, each
recording is made readable (a copy of what a live cockpit has committed when one is
writing it, as `cockpit report` reads it) and the result shown.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cockpit.errors import CockpitError

if TYPE_CHECKING:
    from cockpit.read.compare import Comparison
    from cockpit.ui.compare_app import CompareApp

SIDES_HELP = (
    "Each side is REC.duckdb (the job it trained last, else the one it declared) or "
    "REC.duckdb:JOB (a job of it, as `cockpit report --kpis` lists them); a file whose "
    "own name holds a colon is taken whole when it exists. Two jobs of one recording "
    "(a fork and its parent), or jobs of several (yesterday's run and today's, an "
    "imported run and one a live cockpit is writing). The first side is the reference: "
    "the provenance differences are of it against each other side (as `cockpit diff`)."
)
EPILOG = """\
examples:
  cockpit compare run.duckdb:base run.duckdb:base-fork-1   # a fork beside its parent
  cockpit compare yesterday.duckdb today.duckdb             # two recordings
  cockpit compare tb.duckdb:run-a live.duckdb --format markdown

The screen: the train losses (lines) and validation losses (points) overlaid, x = step;
`x` flips to the time since each job's first step. Below: final and best losses, speed
(steps/s, samples/s, tokens/s), the provenance differences and the KPIs. Esc or q quits.

exit status: 0 shown; 2 a side that names no recording or a job the recording lacks,
or a recording that cannot be read."""


def add_command(sub: argparse._SubParsersAction,
                add_theme: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "compare", help="jobs of one or several recordings side by side: losses overlaid, "
        "final and best metrics, speed, KPIs and what changed (see docs/compare.md)",
        description="Compare jobs side by side. " + SIDES_HELP, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sides", nargs="+", metavar="REC[:JOB]",
                   help="two to six sides: REC.duckdb or REC.duckdb:JOB")
    p.add_argument("--format", choices=("text", "markdown", "json"), default=None,
                   help="print the comparison instead of opening the compare screen")
    add_theme(p)


def _names(paths: list[Path]) -> dict[Path, str]:
    """What the comparison calls each recording: its file name, or the path as given
    when two recordings share a file name."""
    names: dict[Path, str] = {}
    for path in paths:
        clash = any(o.name == path.name and o.resolve() != path.resolve() for o in paths)
        names[path.resolve()] = str(path) if clash else path.name
    return names


def comparison_of(texts: list[str]) -> tuple[Comparison, Path]:
    """The comparison of the sides named `texts` (REC or REC:JOB), each recording read
    as `cockpit report` reads it, and the first recording's folder (for screenshots)."""
    from cockpit.read.compare import load_comparison, parse_sides
    from cockpit.store.live_socket import LiveSnapshotError, readable_recording

    sides = parse_sides(texts)
    names = _names([path for path, _job in sides])
    with contextlib.ExitStack() as stack:
        readable: dict[Path, Path] = {}
        for path, _job in sides:
            key = path.resolve()
            if key in readable:
                continue
            try:
                readable[key], is_copy = stack.enter_context(readable_recording(path))
            except LiveSnapshotError as exc:
                raise CockpitError(str(exc)) from None
            if is_copy:
                print(f"{path} is being written by a live cockpit: reading a copy of what "
                      "it had committed just now", file=sys.stderr)
        comparison = load_comparison([(readable[p.resolve()], job, names[p.resolve()])
                                      for p, job in sides])
    return comparison, sides[0][0].resolve().parent


def cmd_compare(args: argparse.Namespace, before_ui: Callable[[], None] = lambda: None
                ) -> int:
    """`before_ui`: what to do just before the screen shows (drop keys typed ahead)."""
    from cockpit.read.compare import render_comparison

    comparison, folder = comparison_of(args.sides)
    if args.format is not None:
        print(render_comparison(comparison, args.format), end="")
        return 0
    app = compare_app(comparison, args, screenshots=folder)
    before_ui()
    app.run()
    return 0


def compare_app(comparison: Comparison, args: argparse.Namespace,
                screenshots: Path | None = None) -> CompareApp:
    """The compare screen's app, its theme and keymap checked (a bad one: exit 2);
    screenshots go to `--screenshots`, else to `screenshots`."""
    from cockpit.ui.compare_app import make_compare_app
    from cockpit.ui.keymap import KeymapError
    from cockpit.ui.themes import ThemeError

    try:
        return make_compare_app(comparison, theme=args.theme, keymap_path=args.keymap,
                                screenshot_dir=getattr(args, "screenshots", None)
                                or screenshots)
    except (KeymapError, ThemeError) as exc:
        raise CockpitError(str(exc)) from None


__all__ = ["add_command", "cmd_compare", "compare_app", "comparison_of"]
