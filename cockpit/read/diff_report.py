"""`cockpit diff A B`: what changed between two runs (code, data, config, environment,
seed), each side `REC[:JOB]`: two jobs of one recording, two recordings, or a fork and
its parent. Reads each side through the store's read API; the diff itself is
`cockpit.analysis.provenance`. `baseline_of` and `provenance_of` are also what the
run-info drill-down compares a job with (`cockpit.read.details.run_info`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agent.wire.events import FORK
from cockpit.analysis.lifecycle import dict_field
from cockpit.analysis.provenance import Diff, Provenance, as_json, diff, diff_rows, provenance
from cockpit.analysis.text import json_printable, printable
from cockpit.errors import CockpitError
from cockpit.read.report_format import FORMATS, Table, render_sections
from cockpit.store.database import Store, StoreError
from cockpit.store.earlier_runs import launched_again_as
from cockpit.store.queries import StoreReader

DIFF_HEADER = ("section", "key", "A → B", "note")
_EARLIER_NUMBER = re.compile(r"\(earlier run (\d+)\)$")


def parse_side(text: str) -> tuple[Path, str | None]:
    """`REC` or `REC:JOB`: a recording file, and optionally one of its jobs (a file whose
    own name holds a colon is taken whole when it exists)."""
    whole = Path(text)
    if whole.is_file():
        return whole, None
    if ":" in text:
        rec, job = text.rsplit(":", 1)
        if Path(rec).is_file() and job:
            return Path(rec), job
    if whole.is_dir():
        raise CockpitError(f"{text} is a directory: give a recording file (REC or REC:JOB)")
    raise CockpitError(f"{text}: no such recording (expected REC or REC:JOB, REC a DuckDB "
                       "file)")


def fork_data(reader: StoreReader, job: str, until_ts: float | None = None
              ) -> dict[str, Any] | None:
    """The agent's newest successful `fork` event of `job` (parent, step, overrides)."""
    for e in reversed(reader.rare_events((FORK,), job, until_ts)):
        data = dict_field(e, "data")
        if e.get("job") == job and data.get("ok") is not False and data.get("parent"):
            return data
    return None


def provenance_of(reader: StoreReader, job: str, label: str,
                  until_ts: float | None = None) -> Provenance:
    return provenance(label, reader.run_info(job, until_ts=until_ts),
                      fork_data(reader, job, until_ts))


def baseline_of(job: str, forked_from: dict[str, Any] | None, jobs: list[str] | tuple[str, ...]
                ) -> str | None:
    """What a job is compared with: its parent (a fork), else the previous run of its
    name filed in the same recording (`JOB (earlier run N)`, the highest N)."""
    if forked_from and forked_from.get("job") in jobs:
        return str(forked_from["job"])
    earlier = [(int(m.group(1)), j) for j in jobs if launched_again_as(j) == job
               and (m := _EARLIER_NUMBER.search(j))]
    return max(earlier)[1] if earlier else None


def diff_summary(reader: StoreReader, job: str, forked_from: dict[str, Any] | None,
                 jobs: tuple[str, ...] | list[str], until_ts: float | None = None
                 ) -> dict[str, str]:
    """For the run-info drill-down: what changed from the job's parent (a fork) or its
    previous run in this recording; empty when it has neither."""
    base = baseline_of(job, forked_from, jobs)
    if base is None:
        return {}
    d = diff(provenance_of(reader, base, base, until_ts),
             provenance_of(reader, job, job, until_ts))
    out = {"against": base, **({"relation": d.relation} if d.relation else {}),
           "summary": d.summary()}
    for section, key, change, note in diff_rows(d):
        out[f"{section}: {key}"] = change + (f" ({note})" if note else "")
    return out


def _open(path: Path) -> Store:
    try:
        return Store(path, read_only=True)
    except StoreError as exc:
        raise CockpitError(f"{path}: {exc}") from None


def _side(reader: StoreReader, path: Path, job: str | None) -> tuple[str, Provenance]:
    jobs = reader.jobs()
    if job is None:
        job = reader.current_job()
        if job is None:
            raise CockpitError(f"{path.name} records no job")
    elif job not in jobs:
        # The jobs are the recording's names (the hosts'): shown as text.
        raise CockpitError(f"{printable(path.name)} has no job {job!r}; its jobs: "
                           f"{printable(', '.join(jobs) or 'none')}")
    return job, provenance_of(reader, job, f"{path.name}:{job}")


def diff_sides(a: str, b: str | None) -> Diff:
    """The diff of two sides; without `b`, of A against its parent or previous run."""
    path_a, job_a = parse_side(a)
    store = _open(path_a)
    try:
        reader = StoreReader(store)
        job_a, prov_a = _side(reader, path_a, job_a)
        if b is None:
            base = baseline_of(job_a, prov_a.forked_from, reader.jobs())
            if base is None:
                raise CockpitError(f"{printable(job_a)} is no fork and has no earlier run "
                                   f"in {printable(path_a.name)}: name the other side "
                                   "(cockpit diff A B)")
            # The parent first: the diff reads as what the fork changed.
            return diff(provenance_of(reader, base, f"{path_a.name}:{base}"), prov_a)
        path_b, job_b = parse_side(b)
        if path_b.resolve() == path_a.resolve():
            _, prov_b = _side(reader, path_b, job_b)
            return diff(prov_a, prov_b)
    except StoreError as exc:
        raise CockpitError(f"{path_a}: {exc}") from None
    finally:
        store.close()
    store = _open(path_b)
    try:
        _, prov_b = _side(StoreReader(store), path_b, job_b)
    except StoreError as exc:
        raise CockpitError(f"{path_b}: {exc}") from None
    finally:
        store.close()
    return diff(prov_a, prov_b)


def render_diff(a: str, b: str | None = None, fmt: str = "text") -> str:
    # Here, not at the top: the run-info details import this module, and the report's
    # module imports those details (through the source).

    if fmt not in FORMATS:
        raise CockpitError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    d = diff_sides(a, b)
    if fmt == "json":
        return json_printable(json.dumps(as_json(d), indent=2, ensure_ascii=False,
                                         default=str)) + "\n"
    rows = [("A", d.a), ("B", d.b)]
    if d.relation:
        rows.append(("relation", d.relation))
    rows.append(("summary", d.summary()))
    tables: list[Table] = [(DIFF_HEADER, diff_rows(d))] if d.changes else []
    return render_sections([("Changes", rows, tables)], markdown=fmt == "markdown",
                           title=f"Diff: {d.a} → {d.b}")


__all__ = ["baseline_of", "diff_sides", "diff_summary", "fork_data", "parse_side", "provenance_of",
           "render_diff"]
