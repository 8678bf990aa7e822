"""The installed console scripts: help, `cockpit report` on the recorded run, and every
bad input ending as one clear line and exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import build_parser as agent_parser
from cockpit.app.cli import build_parser as cockpit_parser
from tests.ui.recorded import recording_facts

BIN = Path(sys.executable).parent
USAGE_ERROR = 2
INSTRUMENTS = ("progress", "effect", "efficiency", "health")


def run(script: str, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    executable = BIN / script
    if not executable.is_file():
        pytest.fail(f"the {script!r} console script is not installed beside {sys.executable}")
    return subprocess.run([str(executable), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=60, check=False)


def commands_of(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def one_clear_error(result: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refused command (exit 2, nothing on stdout)."""
    assert result.returncode == USAGE_ERROR, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize("script, parser", [
    ("cockpit", cockpit_parser), ("cockpit-agent", agent_parser),
])
def test_help_lists_every_command(script: str, parser) -> None:
    result = run(script, "--help")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("    ")}
    commands = commands_of(parser())
    assert commands and set(commands) <= listed


@pytest.mark.slow
def test_report_json_holds_the_four_instruments_of_the_recording(
        recorded_store: Path) -> None:
    facts = recording_facts()
    result = run("cockpit", "report", recorded_store, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert all(isinstance(report[name], dict) for name in INSTRUMENTS)
    assert report["job"] == facts.job
    assert report["progress"]["step"] == facts.last_step
    assert report["progress"]["total_steps"] == facts.total_steps
    assert report["effect"]["last_val_loss"] == facts.eval_points[-1][1]
    assert (report["effect"]["best_val_step"], report["effect"]["best_val_loss"]) == \
        facts.best_eval
    # Evaluated again at the checkpoint it restarted from: one point per step.
    assert report["effect"]["val_loss"]["step"] == sorted({s for s, _ in facts.eval_points})
    assert [(m["step"], m["kind"]) for m in report["effect"]["markers"]] == [
        (facts.adjust[0], "adjust"), (facts.resumed_step, "restart")]
    (cut,) = report["interruptions"]
    assert cut["cause"] == "killed" and cut["steps_lost"] == \
        facts.interruption["step"] - facts.resumed_step
    # The agent's findings read as one line, strongest first, not a Python list.
    assert cut["evidence"] == "; ".join(facts.interruption["data"]["evidence"])
    assert cut["hosts"] == [facts.host]
    assert report["health"]["simulated"] is facts.simulated
    assert [h["host"] for h in report["health"]["hosts"]] == [facts.host]
    assert report["health"]["hosts"][0]["gpus_total"] == facts.gpu_count
    assert report["efficiency"]["samples_per_s"] > 0
    assert (report["first_ts"], report["last_ts"]) == (facts.first_ts, facts.last_ts)


@pytest.mark.parametrize("fmt, heading", [
    ("text", str.upper), ("markdown", lambda name: f"## {name.capitalize()}"),
])
def test_report_text_and_markdown_have_the_four_sections(
        recorded_store: Path, fmt: str, heading) -> None:
    facts = recording_facts()
    result = run("cockpit", "report", recorded_store, "--format", fmt)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    positions = [lines.index(heading(name)) for name in INSTRUMENTS]
    assert positions == sorted(positions)  # in the main screen's order
    assert facts.job in lines[0] and recorded_store.name in lines[0]
    assert f"{facts.last_step:,} / {facts.total_steps:,}" in result.stdout
    assert facts.host in result.stdout


def test_report_of_a_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    line = one_clear_error(run("cockpit", "report", "missing.duckdb", cwd=tmp_path))
    assert line.startswith("cockpit: missing.duckdb:") and "no such recording" in line


def test_report_of_a_file_that_is_not_a_recording(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("not a database\n")
    line = one_clear_error(run("cockpit", "report", bogus))
    assert str(bogus) in line and "DuckDB" in line


def test_report_of_wire_records_says_what_the_file_is() -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "charlm-run.ndjson.gz"
    line = one_clear_error(run("cockpit", "report", data))
    assert "is not a DuckDB recording: it is gzip-compressed (wire records, perhaps" in line


def test_replay_with_an_unknown_theme_names_the_choices(recorded_store: Path) -> None:
    line = one_clear_error(run("cockpit", "replay", recorded_store, "--theme", "neon"))
    assert "unknown theme 'neon'" in line
    assert all(name in line for name in ("dark", "light", "high-contrast"))


@pytest.mark.parametrize("where", ["before the command", "after the command"])
def test_bad_keymap_names_file_and_line(recorded_store: Path, tmp_path: Path,
                                        where: str) -> None:
    keymap = tmp_path / "keys.toml"
    keymap.write_text('# my keys\nalerts = "A"\npuase_job = "x"\n', encoding="utf-8")
    if where == "before the command":
        args = ("--keymap", keymap, "replay", recorded_store)
    else:
        args = ("replay", recorded_store, "--keymap", keymap)
    line = one_clear_error(run("cockpit", *args))
    assert f"{keymap}:3:" in line and "'puase_job'" in line


def test_replay_of_a_directory_asks_for_the_file_in_it(tmp_path: Path) -> None:
    line = one_clear_error(run("cockpit", "replay", tmp_path))
    assert "is a directory: give the recording file in it" in line


def test_a_demo_dir_that_is_a_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    line = one_clear_error(run("cockpit", "demo", "--dir", taken, "--headless", "1"))
    assert line == (f"cockpit: --dir {taken}: cannot make the demo run's folders there "
                    "(Not a directory): give a folder, new or one of an earlier demo run")
    assert taken.read_text() == "mine\n"


def test_watch_into_a_directory_asks_for_a_file_in_it(tmp_path: Path) -> None:
    line = one_clear_error(run("cockpit", "watch", "me@127.0.0.1:1", "--headless", "1",
                               "--store", tmp_path))
    assert line == (f"cockpit: {tmp_path} is a directory: give the recording's file (a "
                    f"*.duckdb file, e.g. {tmp_path / 'recording.duckdb'})")


@pytest.mark.parametrize("speed", ["0", "-2", "fast", "1e9", "0.1"])
def test_replay_refuses_a_bad_speed(recorded_store: Path, speed: str) -> None:
    result = run("cockpit", "replay", recorded_store, "--speed", speed)
    assert result.returncode == USAGE_ERROR
    assert "Traceback" not in result.stderr
    assert "--speed" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize("text, line_no, what", [
    ('[[hosts]]\naddress = "gpu-1"\nport = \n', 3, "invalid TOML"),
    ('[[hosts]]\naddress = "gpu-1"\n\n[[hosts]]\naddres = "gpu-2"\n', 5, "'addres'"),
])
def test_watch_with_a_malformed_inventory_names_file_and_line(
        tmp_path: Path, text: str, line_no: int, what: str) -> None:
    inventory = tmp_path / "cluster.toml"
    inventory.write_text(text, encoding="utf-8")
    result = run("cockpit", "watch", inventory, "--store", tmp_path / "w.duckdb", cwd=tmp_path)
    line = one_clear_error(result)
    assert str(inventory) in line and what in line
    assert f"line {line_no}" in line or f"{inventory}:{line_no}:" in line
    assert not (tmp_path / "w.duckdb").exists()  # refused before anything was recorded


@pytest.mark.parametrize("window", ["3", "30s", "0.5m", "week"])
def test_watch_refuses_a_bad_retention_window(tmp_path: Path, window: str) -> None:
    result = run("cockpit", "watch", "gpu-1", "--keep-raw", window,
                 "--store", tmp_path / "w.duckdb")
    assert result.returncode == USAGE_ERROR
    assert "Traceback" not in result.stderr
    assert "--keep-raw" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "w.duckdb").exists()


@pytest.mark.parametrize("window, seconds", [("36h", 129_600), ("2w", 1_209_600),
                                             ("90m", 5_400), ("1.5d", 129_600)])
def test_watch_takes_a_retention_window_with_its_unit(window: str, seconds: float) -> None:
    args = cockpit_parser().parse_args(["watch", "gpu-1", "--keep-raw", window])
    assert args.keep_raw == seconds


@pytest.mark.parametrize(("args", "words"), [
    (("demo", "--simulate-gpus", "-2"), "--simulate-gpus: must be 0 or more, got -2"),
    (("demo", "--nproc", "0"), "--nproc: must be 1 or more, got 0"),
    (("demo", "--headless", "nan"), "--headless: must be a positive number"),
    (("watch", "gpu-1", "--headless", "-1"), "--headless: must be a positive number"),
    (("watch", "gpu-1", "--headless", "inf"), "--headless: must be a positive number"),
    (("fork", "job.toml", "--step", "-5"), "--step: must be 0 or more, got -5"),
    (("fork", "job.toml", "--name", "a/b"), "--name: 'a/b' cannot name a folder"),
    (("adjust", "job.toml", "--lr-scale", "1000"),
     "--lr-scale: must be a finite factor within 0.001–100 (1 = as configured), got 1000"),
    (("fork", "job.toml", "--set", "lr=nan"), "--set lr=nan: not a finite number"),
    (("adjust", "job.toml", "--knob", "clip=-inf"), "--knob clip=-inf: not a finite number"),
])
def test_numbers_a_run_cannot_use_are_refused_up_front(args: tuple[str, ...],
                                                       words: str) -> None:
    result = run("cockpit", *args)
    assert result.returncode == USAGE_ERROR and "Traceback" not in result.stderr
    assert words in result.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_headless_watch_whose_host_never_connected_fails_and_says_why(
        tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = tmp_path / "w.duckdb"
    # Time for the refusal to arrive on a loaded machine; a host still connecting at the
    # end fails the run too (tests/transport/test_link_problems.py).
    result = run("cockpit", "watch", f"me@127.0.0.1:{port}", "--headless", "5",
                 "--store", store)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (f"cockpit: host 127.0.0.1:{port}: link unreachable: me@127.0.0.1:{port}: "
            "cannot connect") in result.stderr
    # The recording keeps the reason: its report shows the link as it was, not "stopped".
    report = run("cockpit", "report", store).stdout
    assert "host_unreachable" in report and "Connection refused" in report
    again = run("cockpit", "watch", f"me@127.0.0.1:{port}", "--headless", "1",
                "--store", store)
    assert f"appending to the existing recording {store}" in again.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [("demo", "--dir", "DIR"), ("watch", "me@127.0.0.1:1")])
def test_a_bad_theme_or_keymap_is_refused_before_anything_starts(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    args = [tmp_path / "run" if a == "DIR" else a for a in command]
    line = one_clear_error(run("cockpit", *args, "--theme", "neon"))
    assert "unknown theme 'neon'" in line
    line = one_clear_error(run("cockpit", *args, "--keymap", tmp_path / "missing.toml"))
    assert "missing.toml: cannot read keymap" in line
    assert not (tmp_path / "run").exists()  # the demo did not start


def test_the_demos_crash_comes_between_two_checkpoints_or_not_at_all() -> None:
    from cockpit.app.cli import default_fault_step

    assert [default_fault_step(n) for n in (3000, 500, 100, 50, 1)] == [1250, 250, 50, 0, 0]
