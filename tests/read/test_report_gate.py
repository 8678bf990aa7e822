"""`cockpit report --at` and the report's exit status (`--fail-if`, failed jobs,
critical alerts): the expressions and the verdict as pure functions, then the command
on real recordings written through the real ingest path."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from agent.wire.protocol import encode
from cockpit.analysis.gate import (
    EXIT_CRITICAL_ALERT,
    EXIT_JOB_FAILED,
    EXIT_OK,
    EXIT_THRESHOLD,
    EXIT_UNUSABLE,
    METRICS,
    GateError,
    parse_at,
    parse_threshold,
    verdict,
)
from cockpit.app.cli import main
from cockpit.store.database import Store
from tests.read import synthetic as syn

SHORT = 300  # steps: before the synthetic run's spike and NaN step


def _finish(path: Path, *, returncode: int | None = 0, gave_up: bool = False) -> Path:
    """The short synthetic run declared done at its last step and exited (or given up)."""
    last = syn.step_ts(SHORT - 1)
    lines = encode("run", 10**6, {"job": "job-1", "rank": 0, "total_steps": SHORT - 1},
                   ts=last + 0.5)
    if gave_up:
        lines += encode("event", 10**6 + 1, {
            "kind": "interruption", "job": "job-1", "rank": None, "step": SHORT - 1,
            "msg": "user_code", "data": {"cause": "user_code",
                                         "decision": {"retry": False, "reason": "twice"}}},
                        ts=last + 1)
    else:
        lines += encode("event", 10**6 + 1, {
            "kind": "job_exited", "job": "job-1", "rank": None, "step": None,
            "msg": "job job-1 exited", "data": {"returncode": returncode}}, ts=last + 1)
    with Store(path) as store:
        store.ingest("node-a", lines)
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fin") / "run.duckdb"
    return _finish(syn.write_recording(path, steps=SHORT))


def _report(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["report", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- expressions ---------------------------------------------------------------------

def test_thresholds_read_as_metric_operator_number() -> None:
    t = parse_threshold(" val_loss >= 2e-1 ")
    assert (t.metric, t.op, t.value, t.text) == ("val_loss", ">=", 0.2, "val_loss >= 2e-1")
    assert parse_threshold("gpu_util<0.5").op == "<"


@pytest.mark.parametrize(("text", "says"), [
    ("val_loss", "not METRIC OP NUMBER"),
    ("val_loss>>2", "not METRIC OP NUMBER"),
    ("val_loss>two", "not METRIC OP NUMBER"),
    ("accuracy>0.5", "no metric 'accuracy'; known: loss, val_loss"),
    ("loss>1.2.3", "'1.2.3' is not a number"),
])
def test_a_bad_threshold_is_named_with_why(text: str, says: str) -> None:
    with pytest.raises(GateError) as err:
        parse_threshold(text)
    assert repr(text) in str(err.value) and says in str(err.value)


def test_at_reads_a_step_an_offset_or_a_time() -> None:
    assert parse_at("40000").step == 40000
    assert parse_at("+3600").offset == 3600.0
    assert parse_at("2026-12-03T09:00:00Z").ts == datetime.fromisoformat(
        "2026-12-03T09:00:00+00:00").timestamp()
    local = datetime(2026, 12, 3, 9, 0)
    assert parse_at("2026-12-03T09:00").ts == local.timestamp()
    with pytest.raises(GateError, match="'yesterday' is not a step"):
        parse_at("yesterday")


# -- the verdict ---------------------------------------------------------------------

def _data(state: str = "running", alerts: tuple[str, ...] = (), **effect: float) -> dict:
    return {"job": "j", "progress": {"state": state, "step": 10, "eta_note": None},
            "effect": {"last_val_loss": 1.5, **effect, "markers": []},
            "efficiency": {"gpu_busy": 40.0}, "interruptions": [],
            "alerts": [{"severity": s, "code": f"c{i}", "what": "w", "where": "x"}
                       for i, s in enumerate(alerts)]}


def test_the_verdict_is_the_most_severe_reason_and_names_every_one() -> None:
    assert verdict(_data(alerts=("warning",)), []) == (EXIT_OK, [])
    assert verdict(_data("failed"), [])[0] == EXIT_JOB_FAILED
    assert verdict(_data("exited"), [])[0] == EXIT_JOB_FAILED
    assert verdict(_data(alerts=("critical",)), [])[0] == EXIT_CRITICAL_ALERT
    code, why = verdict(_data(alerts=("critical",)), [parse_threshold("val_loss>1")])
    assert code == EXIT_CRITICAL_ALERT and len(why) == 2
    assert "--fail-if 'val_loss>1': val_loss is 1.5" in why[1]
    assert verdict(_data(), [parse_threshold("val_loss>2")]) == (EXIT_OK, [])
    # GPU busy is 0..100 in the report, 0..1 in the gate.
    assert verdict(_data(), [parse_threshold("gpu_util<0.5")])[0] == EXIT_THRESHOLD
    assert verdict(_data(), [parse_threshold("gpu_util<0.3")])[0] == EXIT_OK
    code, why = verdict(_data(), [parse_threshold("mfu>0")])
    assert code == EXIT_THRESHOLD and "mfu is not known" in why[0]


@pytest.mark.slow
def test_every_metric_reads_the_reports_own_data(finished: Path) -> None:
    from cockpit.read.report import report_data

    data = report_data(finished)
    known = {name for name, (_what, read) in METRICS.items() if read(data) is not None}
    assert {"loss", "val_loss", "best_val_loss", "lr", "step", "steps_per_second",
            "samples_per_second", "gpu_util", "data_wait", "interruptions", "restarts",
            "alerts_critical"} <= known
    assert METRICS["step"][1](data) == SHORT - 1
    assert METRICS["interruptions"][1](data) == 1


# -- the command ---------------------------------------------------------------------

def test_a_finished_run_exits_0(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _report(capsys, finished, "--format", "json")
    assert code == EXIT_OK, err
    assert json.loads(out)["progress"]["state"] == "finished"


@pytest.mark.parametrize(("how", "note"), [
    ({"gave_up": True}, "failed (node-a gave up after user_code: twice)"),
    ({"returncode": 1}, "exited with code 1"),
])
def test_a_failed_run_exits_3_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           how: dict, note: str) -> None:
    path = _finish(syn.write_recording(tmp_path / "r.duckdb", steps=SHORT), **how)
    code, _out, err = _report(capsys, path)
    assert code == EXIT_JOB_FAILED
    assert f"cockpit: job job-1 {note}" in err


@pytest.mark.slow
def test_an_active_critical_alert_exits_4(recording: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _report(capsys, recording)
    assert code == EXIT_CRITICAL_ALERT
    assert "critical alert nonfinite_loss" in err
    # Before the NaN step, the same run was healthy.
    code, _out, err = _report(capsys, recording, "--at", syn.NAN_STEP - 10)
    assert code == EXIT_OK, err


def test_a_breached_threshold_exits_5(finished: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _report(capsys, finished, "--fail-if", "val_loss>0.5",
                              "--fail-if", "step<100")
    assert code == EXIT_THRESHOLD
    assert "--fail-if 'val_loss>0.5': val_loss is 0.9" in err and "step<100" not in err
    code, _out, err = _report(capsys, finished, "--fail-if", "val_loss>5")
    assert code == EXIT_OK, err


@pytest.mark.slow
def test_the_exit_status_reaches_the_shell(finished: Path, tmp_path: Path) -> None:
    """The installed `cockpit` command, as a CI step runs it: the process's own status."""
    cockpit = str(Path(sys.executable).parent / "cockpit")
    failed = _finish(syn.write_recording(tmp_path / "r.duckdb", steps=SHORT), returncode=1)
    for args, code in ((["report", str(finished)], EXIT_OK),
                       (["report", str(failed)], EXIT_JOB_FAILED),
                       (["report", str(finished), "--fail-if", "val_loss>0.5"], EXIT_THRESHOLD)):
        done = subprocess.run([cockpit, *args], capture_output=True, text=True, timeout=180)
        assert done.returncode == code, (args, done.stderr[-2000:])


def test_a_bad_threshold_is_a_usage_error(finished: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["report", str(finished), "--fail-if", "speed>1"])
    assert ended.value.code == EXIT_UNUSABLE
    assert "--fail-if 'speed>1': no metric 'speed'" in capsys.readouterr().err


def test_at_a_step_reports_that_steps_figures(recording: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _report(capsys, recording, "--at", 100, "--format", "json")
    data = json.loads(out)
    assert data["recording"] == str(recording)
    assert data["progress"]["step"] == 100
    assert data["effect"]["last_loss"] == syn.train_loss(100)
    assert data["at"] == syn.step_ts(100)
    # After the outage: the instant of that step's own record, not of a neighbour's.
    code, out, _ = _report(capsys, recording, "--at", syn.INTERRUPT_AFTER_STEP + 5,
                           "--format", "json")
    assert json.loads(out)["at"] == syn.step_ts(syn.INTERRUPT_AFTER_STEP + 5)
    code, _out, err = _report(capsys, recording, "--at", 10**6)
    assert code == EXIT_UNUSABLE
    assert f"job job-1 never reached step 1,000,000 in this recording (step {syn.STEPS - 1:,} " \
           "at most)" in err


def test_at_an_offset_or_a_time(recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _code, out, _ = _report(capsys, recording, "--at", "+60", "--format", "json")
    data = json.loads(out)
    assert data["at"] == data["first_ts"] + 60
    when = datetime.fromtimestamp(syn.step_ts(200)).isoformat()
    _code, out, _ = _report(capsys, recording, "--at", when, "--format", "json")
    assert json.loads(out)["progress"]["step"] == 200


def test_the_help_documents_the_exit_status_and_the_metrics(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 the run is healthy" in text and "5 a --fail-if threshold" in text
    assert all(f"{name}:" in text for name in METRICS)
