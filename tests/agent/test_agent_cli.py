from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from agent.cli import build_parser
from tests.harness.waiting import wait_for

from .conftest import REPO, agent_cmd, agent_env


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(agent_cmd(*args), cwd=REPO, env=agent_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_help_lists_the_commands() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for command in ("run", "stream", "status", "build-zipapp", "version"):
        assert command in result.stdout


def test_module_cli_runs_when_executed_directly() -> None:
    result = subprocess.run([sys.executable, "-m", "agent.cli", "--help"], cwd=REPO,
                            env=agent_env(), capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and "build-zipapp" in result.stdout


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--interval", "nan", "finite number of seconds >= 0.25"),
    ("--interval", "inf", "finite number of seconds >= 0.25"),
    ("--interval", "1e10", "at most 86400 s"),
    ("--max-journal-days", "-1", "finite number > 0"),
    ("--max-journal-days", "0", "finite number > 0"),
    ("--max-journal-days", "nan", "finite number > 0"),
    ("--max-journal-bytes", "0", "must be > 0"),
    ("--stop-grace", "-1", "finite number > 0"),
    ("--stop-grace", "inf", "finite number > 0"),
    ("--stop-grace", "1e10", "at most 86400 s"),  # past the stop timer's range: no SIGKILL
    ("--simulate-gpus", "-1", "must be >= 0"),
    ("--job", "a/b", "job id 'a/b' cannot name a folder: no '/'"),
])  # fmt: skip
def test_bad_run_option_is_refused_naming_it(capsys, option: str, value: str,
                                             message: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", f"{option}={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and message in err


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path, procs) -> None:
    bad_interval = _run("run", "--state-dir", str(tmp_path), "--interval", "0.1")
    assert bad_interval.returncode == 2 and ">= 0.25" in bad_interval.stderr
    missing = _run("run", "--state-dir", str(tmp_path / "s1"), "--", "/no/such/binary")
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "/no/such/binary" in missing.stderr
    assert "Traceback" not in missing.stderr
    status = _run("status", "--state-dir", str(tmp_path / "nothing"))
    assert status.returncode == 2 and "no agent journal" in status.stderr
    # A second daemon on the same state dir is refused while the first runs.
    first = procs("run", "--state-dir", str(tmp_path / "s2"), "--simulate-gpus", "1")
    wait_for(lambda: _status(tmp_path / "s2").get("daemon"), what="first daemon")
    second = _run("run", "--state-dir", str(tmp_path / "s2"))
    assert second.returncode == 2
    assert f"another cockpit-agent daemon (pid {first.popen.pid})" in second.stderr
    assert first.terminate() == 0
    assert _status(tmp_path / "s2")["daemon"] is False


def _status(state: Path) -> dict:
    result = _run("status", "--state-dir", str(state), "--json")
    return json.loads(result.stdout) if result.returncode == 0 else {}


@pytest.mark.slow
def test_zipapp_runs_version_run_and_stream(tmp_path: Path) -> None:
    built = _run("build-zipapp", "--out", str(tmp_path))
    assert built.returncode == 0, built.stderr
    pyz = tmp_path / "agent.pyz"
    assert Path(built.stdout.strip()) == pyz
    names = zipfile.ZipFile(pyz).namelist()
    assert "__main__.py" in names and "agent/journal/journal.py" in names and "pynvml.py" in names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    # Run it from a directory where the source tree is not importable.
    python = shutil.which("python3") or sys.executable
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()

    def pyz_run(*args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen([python, str(pyz), *args], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, **kw)

    version = pyz_run("version", stdin=subprocess.DEVNULL)
    out, _ = version.communicate(timeout=30)
    assert version.returncode == 0 and out.startswith(b"cockpit-agent ")
    state = tmp_path / "state"
    daemon = pyz_run("run", "--state-dir", str(state), "--simulate-gpus", "1",
                     "--interval", "0.25", stdin=subprocess.DEVNULL)
    stream = pyz_run("stream", "--state-dir", str(state), "--from", "0",
                     stdin=subprocess.PIPE)
    try:
        header = json.loads(stream.stdout.readline())
        assert header["t"] == "stream" and header["protocol"] == 1
        seen = []
        while len(seen) < 4:
            seen.append(json.loads(stream.stdout.readline()))
        assert seen[0]["t"] == "hello" and seen[0]["gpu_state"] == "simulated"
        assert any(r["t"] == "gpu" and r["sim"] is True for r in seen)
        stream.stdin.close()
        assert stream.wait(10) == 0
    finally:
        for proc in (stream, daemon):
            if proc.poll() is None:
                proc.terminate()
            proc.wait(20)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe:
                    pipe.close()
    assert daemon.returncode == 0


def test_agent_imports_stay_light() -> None:
    code = (
        "import sys, agent.cli, agent.daemon, agent.journal.stream, agent.samplers, agent.zipapp\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'duckdb', 'textual', 'cockpit', 'orjson', 'pyarrow', 'paramiko')]\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=agent_env(),
                            capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
