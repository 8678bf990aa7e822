"""`cockpit compare A B [C…] --format …` on real stores: a fork and its parent written
through the real wire encoding and ingest (tests/harness/fork_runs.py), an imported
JSONL log beside the recorded real run (tests/data), and the errors that exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cockpit.app.cli import main
from cockpit.importers.sources import import_paths
from tests.harness import fork_runs
from tests.ui.recorded import recording_facts

T0 = 1_790_000_000.0
JSONL_STEPS = 60
JSONL_STEP_S = 0.5


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fork_runs.write_fork_and_parent(tmp_path_factory.mktemp("cmp") / "runs.duckdb")


def jsonl_loss(step: int) -> float:
    return 3.0 / (step + 1)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL metric log of JSONL_STEPS steps, imported as `cockpit import` does."""
    where = tmp_path_factory.mktemp("jsonl")
    log = where / "metrics.jsonl"
    log.write_text("".join(json.dumps({
        "step": s, "ts": T0 + JSONL_STEP_S * s, "loss": jsonl_loss(s),
        **({"val_loss": jsonl_loss(s) - 0.5} if s % 20 == 0 else {})}) + "\n"
        for s in range(1, JSONL_STEPS + 1)))
    rec = where / "imported.duckdb"
    import_paths([log], rec)
    return rec


def cockpit(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_a_fork_beside_its_parent_lists_its_override_and_both_runs_metrics(
        forks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "compare", f"{forks}:parent", f"{forks}:fork",
                             "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    parent, fork = data["sides"]
    assert (parent["job"], fork["job"]) == ("parent", "fork")
    last = fork_runs.LAST_STEP
    assert parent["final_loss"] == {"step": last, "loss": fork_runs.parent_loss(last)}
    assert fork["final_loss"] == {"step": last, "loss": fork_runs.fork_loss(last)}
    # Falling losses: the best is the last; evaluations add 0.1 (fork_runs._evals).
    assert fork["best_val_loss"]["loss"] == pytest.approx(fork_runs.fork_loss(last) + 0.1)
    for side in (parent, fork):
        assert side["speed"]["steps_per_s"] == pytest.approx(1 / fork_runs.STEP_S)
        assert side["speed"]["samples_per_s"] == pytest.approx(
            fork_runs.SAMPLES / fork_runs.STEP_S)
        assert side["speed"]["basis"] == "step time"
        assert side["kpis"]["job"] == side["job"] and side["kpis"]["gpu_hours"] > 0
    (d,) = data["diffs"]
    assert d["relation"] == (f"B (fork) is a fork of parent at step {fork_runs.FORK_STEP} "
                             f"with optim.lr={fork_runs.FORK_LR}")
    assert [(c["section"], c["key"], c["old"], c["new"]) for c in d["changes"]] == [
        ("config", "optim.lr", fork_runs.PARENT_LR, fork_runs.FORK_LR)]
    # The report's compare sections, side by side.
    code, out, err = cockpit(capsys, "compare", f"{forks}:parent", f"{forks}:fork",
                             "--format", "markdown")
    assert code == 0, err
    assert "## Provenance" in out and "## KPIs" in out and "## Metrics" in out
    assert f"| config | optim.lr | {fork_runs.PARENT_LR} | {fork_runs.FORK_LR} |" in out
    assert "| metric | parent | fork |" in out
    code, out, _ = cockpit(capsys, "compare", f"{forks}:parent", f"{forks}:fork",
                           "--format", "text")
    assert "optim.lr" in out and "is a fork of parent" in out and "steps/s" in out


@pytest.mark.slow
def test_a_recording_names_its_main_job_and_three_sides_line_up(
        forks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # REC alone: the job it trained last (the fork, whose steps end last).
    code, out, err = cockpit(capsys, "compare", f"{forks}:parent", forks, f"{forks}:parent",
                             "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["job"] for s in data["sides"]] == ["parent", "fork", "parent"]
    assert [d["changed"] for d in data["diffs"]] == [["config"], []]
    code, out, _ = cockpit(capsys, "compare", f"{forks}:parent", forks, f"{forks}:parent",
                           "--format", "markdown")
    # The third side is the first again: it shows the first's value.
    assert (f"| config | optim.lr | {fork_runs.PARENT_LR} | {fork_runs.FORK_LR} | "
            f"{fork_runs.PARENT_LR} |") in out


@pytest.mark.slow
def test_an_imported_jsonl_run_beside_a_recorded_run(
        imported: Path, recorded_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "compare", imported, recorded_store, "--format", "json")
    assert code == 0, err
    log, recorded = json.loads(out)["sides"]
    facts = recording_facts()
    assert (log["recording"], log["job"]) == ("imported.duckdb", "metrics")
    assert (recorded["recording"], recorded["job"]) == (recorded_store.name, facts.job)
    assert log["final_loss"] == {"step": JSONL_STEPS, "loss": jsonl_loss(JSONL_STEPS)}
    assert log["best_val_loss"]["loss"] == pytest.approx(jsonl_loss(JSONL_STEPS) - 0.5)
    # The log's wall times: JSONL_STEP_S apart.
    assert log["speed"]["steps_per_s"] == pytest.approx(1 / JSONL_STEP_S)
    assert recorded["last_step"] == facts.last_step
    assert recorded["best_val_loss"]["loss"] == pytest.approx(facts.best_eval[1])
    assert recorded["best_val_loss"]["step"] == facts.best_eval[0]
    # The log declares no commit; the recorded run does: named as a difference.
    (d,) = json.loads(out)["diffs"]
    assert "code" in d["changed"]
    code, out, _ = cockpit(capsys, "compare", imported, recorded_store, "--format", "text")
    assert "imported.duckdb:metrics" in out and f"{recorded_store.name}:{facts.job}" in out


def test_bad_sides_are_named_and_exit_2(forks: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "compare", tmp_path / "missing.duckdb", forks)
    assert code == 2 and not out
    assert "missing.duckdb: no such recording (expected REC or REC:JOB" in err
    code, _, err = cockpit(capsys, "compare", f"{forks}:parent", f"{forks}:nope")
    assert code == 2 and "runs.duckdb has no job 'nope'; its jobs: parent, fork" in err
    code, _, err = cockpit(capsys, "compare", forks)
    assert code == 2 and "at least two sides" in err
    code, _, err = cockpit(capsys, "compare", tmp_path, forks)
    assert code == 2 and "is a directory" in err
    with pytest.raises(SystemExit) as done:
        main(["compare", str(forks), str(forks), "--format", "yaml"])
    assert done.value.code == 2


def test_help_says_how_a_side_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "REC.duckdb:JOB" in out and "exit status" in out


@pytest.mark.slow
def test_the_report_has_a_compare_section_with_the_provenance_differences(
        forks: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`cockpit report REC --compare OTHER`: the report of the run, then the comparison
    with the other side (text and Markdown), or under `compare` in the JSON report."""
    code, out, err = cockpit(capsys, "report", forks, "--job", "fork",
                             "--compare", f"{forks}:parent", "--format", "markdown")
    assert code == 0, err
    report, _, section = out.partition("# Compare: ")
    assert "fork" in report and section, out
    assert section.startswith(f"{forks.name}:fork vs {forks.name}:parent")
    assert "## Provenance" in section and "## KPIs" in section
    assert f"| config | optim.lr | {fork_runs.FORK_LR} | {fork_runs.PARENT_LR} |" in section
    # Without --job the report's own job (the one that trained last) is the first side.
    code, out, err = cockpit(capsys, "report", forks, "--compare", f"{forks}:parent")
    assert code == 0, err
    assert "Compare: " in out and "optim.lr" in out.partition("Compare: ")[2]
    code, out, err = cockpit(capsys, "report", forks, "--compare", f"{forks}:parent",
                             "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["job"] for s in data["compare"]["sides"]] == ["fork", "parent"]
    (d,) = data["compare"]["diffs"]
    assert [(c["key"], c["old"], c["new"]) for c in d["changes"]] == [
        ("optim.lr", fork_runs.FORK_LR, fork_runs.PARENT_LR)]


def test_report_compare_with_a_missing_side_exits_2(
        forks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = cockpit(capsys, "report", forks, "--compare", tmp_path / "none.duckdb")
    assert code == 2 and "none.duckdb" in err
