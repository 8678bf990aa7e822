"""What the plain CLI prints of a recording, a config file, a host or an SSH server is
text: a job name, an unknown key, a port, an agent's stderr or a server's banner with an
escape sequence, a C1 CSI or a bidi override in it reaches neither stdout nor stderr as
a control (the error messages, the report's section names and table headers included)."""

from __future__ import annotations

import argparse
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.app import cli
from cockpit.app.cli import main
from cockpit.errors import CockpitError
from tests.cli.test_diff_kpis import CONFIG, T, _run, _steps, write_store

HOSTILE = "j\x1b]0;PWN\x07\u009b2J\u202e"
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def assert_text(*outputs: str) -> None:
    for output in outputs:
        for control in CONTROLS:
            assert control not in output, (control, output)


def cockpit(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    assert_text(out.out, out.err)
    return code, out.out, out.err


@pytest.fixture(scope="module")
def hostile_jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of two jobs, `base` and one named with controls in it."""
    records = [
        (T + 1, "event", {"kind": "job_started", "job": "base", "data": {"reason": "launch"}}),
        _run("base", T + 2, CONFIG, "dv-1"), *_steps("base", T + 5, 1, 10),
        (T + 100, "event", {"kind": "job_started", "job": HOSTILE,
                            "data": {"reason": "launch"}}),
        _run(HOSTILE, T + 101, CONFIG, "dv-2"), *_steps(HOSTILE, T + 105, 1, 10),
    ]
    return write_store(tmp_path_factory.mktemp("hostile") / "runs.duckdb", records)


@pytest.mark.parametrize("args", [
    ("report", "{rec}", "--job", "nope"),
    ("report", "--kpis", "{rec}", "--job", "nope"),
    ("compare", "{rec}:base", "{rec}:nope"),
    ("diff", "{rec}:nope", "{rec}:base"),
    ("diff", "{rec}:" + HOSTILE),
], ids=["report", "kpis", "compare", "diff", "diff-no-fork"])
def test_an_error_that_lists_a_recordings_jobs_shows_them_as_text(
        hostile_jobs: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, out, err = cockpit(capsys, *(a.replace("{rec}", str(hostile_jobs)) for a in args))
    assert code == 2 and not out
    assert "j\u241b]0;PWN\u2407\\x9b2J\\u202e" in err


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_kpi_reports_section_names_show_a_job_name_as_text(
        hostile_jobs: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    code, out, err = cockpit(capsys, "report", "--kpis", "--format", fmt, hostile_jobs)
    assert code == 0, err
    # The section named after the job: upper-cased as it was sent, then shown as text.
    shown = "J\u241b]0;PWN\u2407\\x9b2J\\u202e" if fmt == "text" else "j\u241b]0;PWN"
    assert f"{shown}" in out


def test_the_report_of_a_hostile_job_prints_as_text(
        hostile_jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cockpit(capsys, "report", hostile_jobs)
    assert code == 0, err
    assert "Training report: j\u241b]0;PWN" in out


def test_an_unknown_alerts_key_is_named_as_text(
        hostile_jobs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alerts = tmp_path / "alerts.toml"
    alerts.write_text('[alerts]\n"k\\u001b]0;PWN\\u0007\\u009b2J\\u202e" = 1\n')
    code, out, err = cockpit(capsys, "--alerts", alerts, "report", hostile_jobs)
    assert code == 2 and not out
    assert "alerts.k\u241b]0;PWN\u2407\\x9b2J\\u202e is not a threshold" in err


@pytest.mark.parametrize("field", [
    'port = "2\\u001b]0;PWN\\u0007\\u009b2J\\u202e"',
    'address = "gpu1\\u202e"',
    'address = "gpu1\\u009b2J"',
    'user = "u\\u2066x"',
], ids=["port", "address-bidi", "address-c1", "user-isolate"])
def test_an_inventory_value_with_controls_is_refused_and_named_as_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    inventory = tmp_path / "fleet.toml"
    line = field if field.startswith("address") else f'address = "gpu1"\n{field}'
    inventory.write_text(f'[[hosts]]\nname = "gpu1"\n{line}\n')
    code, out, err = cockpit(capsys, "check", inventory)
    assert code == 2 and not out
    assert f"{inventory}:" in err


def test_the_cli_shows_any_error_message_as_text(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The choke point: a CockpitError that quotes untrusted text unsanitised (some
    future message) still reaches stderr as text, its lines kept."""
    def failing(_args: argparse.Namespace) -> int:
        raise CockpitError(f"first {HOSTILE}\nsecond \x1b[31mred")

    monkeypatch.setitem(cli.COMMANDS, "report", failing)
    code, out, err = cockpit(capsys, "report", "x.duckdb")
    assert code == 2 and not out
    assert err == ("cockpit: first j\u241b]0;PWN\u2407\\x9b2J\\u202e\n"
                   "second \u241b[31mred\n")


def test_a_headless_runs_link_problems_print_as_text(
        hostile_jobs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(headless=1.0)
    code = cli._after_live(hostile_jobs, args,
                           {HOSTILE: f"agent stream exited with status 1: {HOSTILE}"},
                           store_problem=f"lost {HOSTILE}")
    out = capsys.readouterr()
    assert code == 1
    assert_text(out.out, out.err)
    assert "link agent stream exited with status 1: j\u241b]0;PWN" in out.err


@pytest.fixture()
def hostile_banner() -> Iterator[int]:
    """A loopback port whose server sends lines that are not SSH, with controls in them
    (paramiko quotes the last it reads: `Indecipherable protocol version "…"`)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                try:
                    conn.sendall("\x1b]0;PWN\x07\u009b2J\u202e\r\n".encode() * 100)
                    stop.wait(1.0)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=3)
    server.close()


def test_hosts_trust_shows_a_servers_banner_as_text(
        hostile_banner: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("")
    code, out, err = cockpit(capsys, "hosts", "trust", f"127.0.0.1:{hostile_banner}",
                             "--ssh-config", config, "--known-hosts", tmp_path / "known",
                             "--yes")
    assert code == 2 and not out
    assert "cannot fetch the host key" in err and "\u241b]0;PWN\u2407\\x9b2J" in err
