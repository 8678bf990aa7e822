"""`cockpit import PATH… -o REC`: what each path is, and importing it.

A path is, by its content: TensorBoard event files (a file, or a directory searched for
them: each directory holding some is a run), a wire recording (`.ndjson[.gz]` whose
first line is a protocol record: the agent journal as a cockpit receives it, ingested
as it is), or a JSONL metric log (any other `.jsonl`/`.ndjson`/`.json[.gz]` of objects).
TensorBoard runs and metric logs become jobs on the host `import`; a wire recording
keeps its own host (its `hello`'s hostname, or `--host`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from agent.wire.protocol import HELLO, MAX_LINE_BYTES, RECORD_TYPES
from cockpit.errors import CockpitError
from cockpit.importers import jsonl, tensorboard
from cockpit.importers.lines import open_input, read_lines
from cockpit.importers.records import ImportCounts, RecordingWriter, job_name, records_for

IMPORT_HOST = "import"
WIRE_TYPES = frozenset(RECORD_TYPES)
_LOG_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")

Progress = Callable[[str, int], Callable[[int], None]]


@dataclass(frozen=True)
class Imported:
    source: str
    kind: str  # "tensorboard", "jsonl", "wire"
    job: str | None
    host: str
    counts: ImportCounts


def _first_line(path: Path) -> bytes:
    try:
        with open_input(path) as fh:
            return fh.readline(1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        raise CockpitError(f"{path}: cannot read: {exc}") from None


def kind_of(path: Path) -> str:
    if not path.exists():
        raise CockpitError(f"{path}: no such file or directory")
    if tensorboard.is_event_source(path):
        return "tensorboard"
    if path.is_file() and path.name.endswith(_LOG_SUFFIXES):
        try:
            first = orjson.loads(_first_line(path))
        except orjson.JSONDecodeError:
            first = None
        if (isinstance(first, dict) and first.get("t") in WIRE_TYPES
                and isinstance(first.get("seq"), int)):
            return "wire"
        return "jsonl"
    raise CockpitError(f"{path}: neither TensorBoard event files, a JSONL metric log "
                       "(.jsonl/.ndjson/.json, optionally .gz) nor a wire recording")


def _wire_host(path: Path) -> str:
    first = orjson.loads(_first_line(path))
    name = first.get("hostname") if first.get("t") == HELLO else None
    stem = path.name.split(".")[0]
    return job_name(name if isinstance(name, str) and name else stem)


def import_paths(paths: list[Path], dest: Path, *, overrides: Mapping[str, str] | None = None,
                 job: str | None = None, host: str | None = None,
                 progress: Progress | None = None) -> list[Imported]:
    """Each path imported in turn; what each read, skipped and stored is in its
    `Imported.counts`, and what stopped one early in `counts.problems`."""
    kinds = [(p, kind_of(p)) for p in paths]  # every path checked before anything is written
    done: list[Imported] = []
    for path, kind in kinds:
        size = sum(f.stat().st_size for f in ([path] if path.is_file() else
                                             path.rglob("*")) if f.is_file())
        bar = progress(path.name, size) if progress else None
        if kind == "wire":
            done.append(_import_wire(path, dest, host, bar))
        else:
            sources = (list(tensorboard.runs(path)) if kind == "tensorboard"
                       else [(path.name.split(".")[0], path)])
            for run_name, source in sources:
                if job:  # the operator's name, made one per run when there are several
                    run_name = job if len(sources) == 1 and len(paths) == 1 else (
                        f"{job}-{run_name}")
                counts = ImportCounts()
                points = (tensorboard.read_run(source, counts) if kind == "tensorboard"
                          else jsonl.read_log(source, counts))
                name = job_name(run_name)
                records = records_for(name, points, overrides, counts)
                if records:  # an input with no metrics leaves no trace in the recording
                    with RecordingWriter(dest, host or IMPORT_HOST, counts) as writer:
                        writer.add(records)
                done.append(Imported(str(source), kind, name, host or IMPORT_HOST, counts))
            if bar:
                bar(size)
        finish = getattr(bar, "done", None)
        if finish is not None:
            finish()
    return done


def _import_wire(path: Path, dest: Path, host: str | None,
                 bar: Callable[[int], None] | None) -> Imported:
    """A wire recording's lines, ingested as they are; the store's answer counted (a
    malformed line is kept in its wire errors, a line it holds already is a duplicate)."""
    counts = ImportCounts()
    wire_host = host or _wire_host(path)
    with RecordingWriter(dest, wire_host, counts) as writer:
        for _number, line in read_lines(path, MAX_LINE_BYTES, counts):
            if bar:
                bar(len(line))
            if not line.strip():
                continue  # the store ignores blank lines: neither read nor claimed
            counts.points += 1
            writer.add_lines([line])
    return Imported(str(path), "wire", None, wire_host, counts)
