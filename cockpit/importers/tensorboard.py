"""TensorBoard event files: every scalar, as TensorBoard's `EventAccumulator` holds them.

Each directory holding `events.out.tfevents.*` files is one run, imported as one job
named for its path under the directory given. The import holds exactly the (tag, step,
value) points the accumulator (all scalars kept, no sampling) would: its files in name
order, its events in file order, and its handling of a run restarted from an earlier
step (a restart written to a new event file keeps both attempts' points of the repeated
steps, each at its own wall time; later points are purged only after a session restart
marker, which torch's SummaryWriter does not write, or, in a file with no version, when
a tag's step goes back). Scalars written as tensors (TF2's `tf.summary.scalar`, a tag
whose first metadata names the `scalars` plugin) are read too. Wall times are kept, so
speed and ETA are true.

The events are read here rather than through the accumulator, whose reader stops at
the first damaged record without a word and trusts every length and payload (a bad one
raises out of it): `cockpit.importers.tfrecord` skips and counts a damaged record and
reads on, and a record that is not an `Event` is counted with its file and offset.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.errors import CockpitError
from cockpit.importers import tfrecord
from cockpit.importers.records import ImportCounts, Point, valid_point

EVENTS_GLOB = "events.out.tfevents.*"
SCALARS_PLUGIN = "scalars"
MAX_TAG_SHOWN = 80  # of a tag quoted in a skipped point's sample


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


def event_files(source: Path) -> list[Path]:
    """The run's event files in the accumulator's order: every file of the directory
    whose name holds `tfevents` (a profiler's empty `.profile-empty` apart), by name."""
    if source.is_file():
        return [source]
    return sorted((p for p in source.iterdir() if "tfevents" in p.name
                   and not p.name.endswith(".profile-empty") and p.is_file()),
                  key=lambda p: p.name)


def read_run(source: Path, counts: ImportCounts) -> list[Point]:
    try:
        from tensorboard.compat.proto import event_pb2

        # protobuf comes with tensorboard, but without types for mypy: looked up by name
        DecodeError = importlib.import_module("google.protobuf.message").DecodeError
    except ImportError:
        raise CockpitError("importing TensorBoard runs needs the tensorboard package: "
                           "pip install 'training-cockpit[import]'") from None
    run = _Run()
    for path in event_files(source):
        for offset, data in tfrecord.read_records(path, counts):
            try:
                event = event_pb2.Event.FromString(data)
            except (DecodeError, RecursionError):
                counts.skip("record not an event", f"{path.name} offset {offset}")
                continue
            run.add(event)
    return run.points(counts)


Sample = tuple[int, float, Any]  # step, wall time, value (a float, or a TensorProto)


@dataclass
class _Run:
    """What the accumulator keeps of a run's events (`EventAccumulator._ProcessEvent`):
    scalars and tensors by tag, in the order met, the first metadata of each tag, and
    the purge of orphaned scalars (tensors are never purged there either)."""

    scalars: dict[str, list[Sample]] = field(default_factory=dict)
    tensors: dict[str, list[Sample]] = field(default_factory=dict)
    plugin: dict[str, str] = field(default_factory=dict)  # tag -> its first metadata's
    file_version: float | None = None
    most_recent_step: int = -1

    def add(self, event: Any) -> None:
        if event.HasField("file_version"):
            from tensorboard.backend.event_processing.event_util import ParseFileVersion

            self.file_version = ParseFileVersion(event.file_version)
        self._maybe_purge(event)
        if not event.HasField("summary"):
            return
        for value in event.summary.value:
            if value.HasField("metadata") and value.tag not in self.plugin:
                self.plugin[value.tag] = value.metadata.plugin_data.plugin_name
            if value.HasField("simple_value"):
                self.scalars.setdefault(value.tag, []).append(
                    (event.step, event.wall_time, value.simple_value))
            elif value.HasField("tensor"):
                tag = value.tag or value.node_name
                if self.plugin.get(tag, SCALARS_PLUGIN) == SCALARS_PLUGIN:  # else dropped
                    self.tensors.setdefault(tag, []).append(
                        (event.step, event.wall_time, value.tensor))

    def _maybe_purge(self, event: Any) -> None:
        """A session restarted at step S (its START marker; or, in a file with no
        version, a tag whose step went back to S): its scalars at S and later are the
        lost session's, and are dropped, as TensorBoard does."""
        if self.file_version and self.file_version >= 2:
            from tensorboard.compat.proto import event_pb2

            if (event.HasField("session_log")
                    and event.session_log.status == event_pb2.SessionLog.START):
                for tag in self.scalars:
                    self._purge(tag, event.step)
        elif event.step < self.most_recent_step and event.HasField("summary"):
            for value in event.summary.value:
                self._purge(value.tag, event.step)
        else:
            self.most_recent_step = event.step

    def _purge(self, tag: str, step: int) -> None:
        kept = self.scalars.get(tag)
        if kept is not None:
            kept[:] = [s for s in kept if s[0] < step]

    def points(self, counts: ImportCounts) -> list[Point]:
        from tensorboard.util import tensor_util

        out: list[Point] = []
        for tag, samples in self.scalars.items():
            for step, wall, value in samples:
                p = valid_point(step, wall, tag, value, counts, _where(tag, step))
                if p is not None:
                    out.append(p)
        for tag, samples in self.tensors.items():
            if self.plugin.get(tag) != SCALARS_PLUGIN:
                continue  # a histogram, an image, text: not a metric
            for step, wall, proto in samples:
                where = _where(tag, step)
                if any(d.size != 1 for d in proto.tensor_shape.dim):
                    counts.skip("tensor not a scalar", where)
                    continue
                try:
                    value = tensor_util.make_ndarray(proto).reshape(()).item()
                except (TypeError, ValueError):
                    counts.skip("tensor not readable", where)
                    continue
                p = valid_point(step, wall, tag, value, counts, where)
                if p is not None:
                    out.append(p)
        return out


def _where(tag: str, step: int) -> str:
    shown = tag if len(tag) <= MAX_TAG_SHOWN else tag[:MAX_TAG_SHOWN] + "…"
    return f"tag {shown!r} step {step}"
