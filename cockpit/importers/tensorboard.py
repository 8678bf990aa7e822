"""TensorBoard event files: every scalar, read by TensorBoard's own `EventAccumulator`.

Each directory holding `events.out.tfevents.*` files is one run, imported as one job
named for its path under the directory given. Reading through TensorBoard's accumulator
(all scalars kept, no sampling) means the import holds exactly the (tag, step, value)
points TensorBoard shows, including its handling of a run restarted from an earlier step
(a restart written to a new event file keeps both attempts' points of the repeated steps,
each at its own wall time; the accumulator purges later points only after a session
restart marker, which torch's SummaryWriter does not write). Scalars written as
tensors (TF2's `tf.summary.scalar`) are read too. Wall times are kept, so speed and ETA
are true.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cockpit.errors import CockpitError
from cockpit.importers.records import ImportCounts, Point, valid_point

EVENTS_GLOB = "events.out.tfevents.*"


def is_event_source(path: Path) -> bool:
    if path.is_file():
        return path.name.startswith("events.out.tfevents.")
    return path.is_dir() and next(path.rglob(EVENTS_GLOB), None) is not None


def runs(path: Path) -> Iterator[tuple[str, Path]]:
    """(run name, directory or file) of each run under `path`."""
    if path.is_file():
        yield path.parent.name or "run", path
        return
    dirs = sorted({p.parent for p in path.rglob(EVENTS_GLOB) if p.is_file()})
    for d in dirs:
        rel = d.relative_to(path).as_posix()
        yield (path.resolve().name if rel == "." else rel), d


def read_run(source: Path, counts: ImportCounts) -> list[Point]:
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.util import tensor_util
    except ImportError:
        raise CockpitError("importing TensorBoard runs needs the tensorboard package: "
                           "pip install 'training-cockpit[import]'") from None
    acc = ea.EventAccumulator(str(source), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    points: list[Point] = []
    for tag in tags.get(ea.SCALARS, []):
        for ev in acc.Scalars(tag):
            p = valid_point(ev.step, ev.wall_time, tag, ev.value, counts)
            if p is not None:
                points.append(p)
    for tag in tags.get(ea.TENSORS, []):
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        for ev in acc.Tensors(tag):
            array = tensor_util.make_ndarray(ev.tensor_proto)
            if array.size != 1:
                counts.skip("tensor not a scalar")
                continue
            p = valid_point(ev.step, ev.wall_time, tag, array.reshape(()).item(), counts)
            if p is not None:
                points.append(p)
    return points
