"""What run this is: config, seed, data version, environment, git commit, tags."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer, Static

from cockpit.read.details import RunInfo
from cockpit.ui import format as fmt
from cockpit.ui.screens.drill_down import DrillDownScreen
from cockpit.ui.widgets.detail_view import DetailView, as_mapping


class RunInfoScreen(DrillDownScreen):
    WHAT = "run"

    def details_params(self) -> dict[str, object]:
        return self.job_params()

    def compose(self) -> ComposeResult:
        yield Static("[b]Run info[/b]", id="screen-title")
        yield DetailView(id="run-details")
        yield Footer()

    def watch_details(self, details: object) -> None:
        if self._ready:
            self.query_one(DetailView).data = shown(details)


def shown(details: object) -> object:
    """Run info as an operator reads it: whether the trainer declared its run is a note
    when it did not (then only what its steps show is known), not a `declared` flag."""
    if not isinstance(details, RunInfo):
        return details
    changes = details.changes
    data = dict(as_mapping(details) or {})
    data = _starts(data, data.pop("run_started", None))
    data.pop("changes", None)
    parent = data.pop("forked_from", None)
    if isinstance(parent, dict):  # first: what this run is a branch of
        step = parent.get("step")
        where = f" at step {step:,}" if isinstance(step, int) else ""
        data = {"forked from": f"{parent.get('job')}{where}", **data}
    if changes:
        data["changed"] = {
            f"{c['field']} ({fmt.timestamp(c['ts'])})": f"{c['old']} → {c['new']}"
            for c in changes}
    data = _kpis_and_diff(data)
    if data.pop("declared", True):
        return data
    return {"note": "no run record from the trainer: only what its steps show", **data}


def _starts(data: dict[str, object], run_started: object) -> dict[str, object]:
    """`started` is when the run on screen started (a restart begins a new one): after a
    recovery or a relaunch the first launch, shown beside it, may be days older."""
    first = data.get("started")
    if not isinstance(run_started, int | float) or run_started == first:
        return data
    out: dict[str, object] = {}
    for key, value in data.items():
        out[key] = run_started if key == "started" else value
        if key == "started" and isinstance(first, int | float):
            out["first launch"] = fmt.timestamp(first)
    return out


def _kpis_and_diff(data: dict[str, object]) -> dict[str, object]:
    """The job's KPIs, and what changed from its parent or previous run, as sections
    named for what they are (none when there is nothing to show)."""
    kpis, compared = data.pop("kpis", None), data.pop("compared", None)
    if isinstance(compared, dict) and compared.get("against"):
        rest = {k: v for k, v in compared.items() if k != "against"}
        data[f"changed since {compared['against']}"] = rest
    if isinstance(kpis, dict) and kpis:
        data["KPIs"] = kpis
    return data
