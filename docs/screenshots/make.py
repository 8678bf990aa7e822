"""The README's screenshot: the main screen replaying a recording of a multi-host run.

The picture is of a recording, not a drawn screen. The recording is written the way
`cockpit watch` writes one (`bench/day_recording.py`): every host's agent stream as wire
lines (`hello`, a `gpu` record per GPU and a `host` record every second, a `train`
record per rank per step, evaluations, logs, checkpoints, an XID on one GPU, thermal
alerts, two interruptions and their recoveries) stored by `Store.ingest_many`, the
writer's own call, with the live session's maintenance, and closed as `cockpit watch`
closes it. The app (`cockpit.ui.app_factory.make_app`, what `cockpit replay` shows)
then opens it in a `ReplaySource` with the cursor on the last record, headless at
160 x 48 under Textual's `run_test`, and the screen is saved as SVG.

    .venv/bin/python docs/screenshots/make.py [--hosts 16] [--minutes 30]
        [--theme dark] [--out docs/screenshots/fleet-dark.svg] [--recording PATH]

`--recording PATH` keeps the recording (built there when missing) for another theme.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import day_recording  # noqa: E402
from cockpit.sessions.replay import ReplaySource  # noqa: E402
from cockpit.ui.app_factory import make_app  # noqa: E402

SIZE = (160, 48)
GPUS_PER_HOST = 8


def record(path: Path, hosts: int, minutes: float) -> None:
    """The recording at `path`: `hosts` hosts of 8 GPUs, one job on all of them."""
    shape = day_recording.Shape(hosts, GPUS_PER_HOST, minutes / 60)
    built = day_recording.build(path, shape)
    print(f"recorded {hosts} hosts x {GPUS_PER_HOST} GPUs, {minutes:g} min: "
          f"{built['records']:,} records in {built['build_s']} s -> {path}", flush=True)


async def shoot(recording: Path, out: Path, theme: str) -> None:
    """Replay `recording` with the cursor on its last record and save the screen."""
    source = ReplaySource(recording)
    source.seek_to(1.0)
    source.pause()
    app = make_app(source, theme=theme)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):  # the first snapshot, then what the panes load after it
            await app.workers.wait_for_complete()
            await pilot.pause()
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(out.name, path=str(out.parent))
    print(f"saved {out}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--theme", default="dark")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "docs" / "screenshots" / "fleet-dark.svg")
    parser.add_argument("--recording", type=Path, default=None,
                        help="keep the recording here (built when missing)")
    args = parser.parse_args()
    if args.hosts < 2:
        parser.error("--hosts: a multi-host run needs 2 or more")
    if args.minutes * 60 < 2 * day_recording.FLUSH_S:
        parser.error(f"--minutes: at least {2 * day_recording.FLUSH_S / 60:g}")
    with tempfile.TemporaryDirectory(prefix="cockpit-screenshot-") as tmp:
        recording = args.recording or Path(tmp) / "fleet.duckdb"
        if not recording.exists():
            record(recording, args.hosts, args.minutes)
        asyncio.run(shoot(recording, args.out.resolve(), args.theme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
