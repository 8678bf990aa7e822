"""Job specs: valid TOML becomes per-host launch specs; every mistake names file, line
and field; nothing in a spec can reach a shell."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.control_inbox import OpError
from agent.launch import LaunchSpec
from cockpit.control.jobspec import JobSpecError, load_jobspec, parse_jobspec

GOOD = textwrap.dedent("""\
    name = "charlm"
    hosts = ["gpu1", "gpu2"]
    nproc_per_node = 4
    python = "/opt/venv/bin/python"
    script = "train.py"
    args = "--config big.toml --set 'optim.lr=1e-3'"
    run_dir = "/data/runs/charlm"

    [env]
    HF_HOME = "/data/hf"

    [resume]
    args = ["--resume", "{checkpoint}"]

    [rendezvous]
    endpoint = "gpu1:29400"

    [recovery]
    restart_budget = 4
    backoff = 2

    [hang]
    floor = 20.0
""")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def test_a_good_spec_becomes_one_launch_spec_per_host(tmp_path: Path) -> None:
    spec = load_jobspec(_write(tmp_path, GOOD), known_hosts=["gpu1", "gpu2", "gpu3"])
    assert spec.args == ("--config", "big.toml", "--set", "optim.lr=1e-3")
    assert (spec.restart_budget, spec.backoff, spec.hang_floor) == (4, 2.0, 20.0)
    wire = spec.for_host("gpu2")
    assert (wire["nnodes"], wire["node_rank"]) == (2, 1)
    launch = LaunchSpec(wire)
    argv = launch.argv("/ck/ckpt-00000100.pt")
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
    flags = dict(zip(argv[3:-7:2], argv[4:-7:2], strict=True))
    assert flags["--nnodes"] == "2" and flags["--node-rank"] == "1"
    assert flags["--rdzv-backend"] == "c10d" and flags["--rdzv-endpoint"] == "gpu1:29400"
    assert flags["--rdzv-id"] == "charlm" and flags["--max-restarts"] == "0"
    assert argv[-7:] == ["train.py", "--config", "big.toml", "--set", "optim.lr=1e-3",
                         "--resume", "/ck/ckpt-00000100.pt"]  # fmt: skip
    assert "--resume" not in launch.argv(None)
    env = launch.environment("/ck/x.pt")
    assert env["HF_HOME"] == "/data/hf" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert launch.hang_floor == 20.0 and launch.restart_budget == 4


@pytest.mark.parametrize(
    ("change", "line", "field", "what"),
    [
        (("nproc_per_node = 4", "nproc_per_node = 0"), 3, "nproc_per_node", "at least 1"),
        (("nproc_per_node = 4", 'nproc_per_node = "4"'), 3, "nproc_per_node", "an integer"),
        (("backoff = 2", 'backoff = "x"'), 20, "recovery.backoff", "got a string"),
        (("floor = 20.0", "florr = 20.0"), 23, "hang.florr", "unknown key"),
        (('endpoint = "gpu1:29400"', 'endpoint = "gpu1"'), 16, "rendezvous.endpoint",
         "HOST:PORT"),
        (('args = ["--resume", "{checkpoint}"]', 'args = ["--resume"]'), 13, "resume.args",
         "{checkpoint}"),
        (('hosts = ["gpu1", "gpu2"]', 'hosts = ["gpu1", "gpu9"]'), 2, "hosts",
         "not in the inventory: gpu9"),
        (('HF_HOME = "/data/hf"', '"BAD NAME" = "x"'), 10, "env.BAD NAME", "variable name"),
        (("floor = 20.0", "floor = 4000.0"), 23, "hang.floor", "shorter than pg_timeout"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, change, line, field, what) -> None:
    path = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(JobSpecError) as info:
        load_jobspec(path, known_hosts=["gpu1", "gpu2"])
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    assert str(err).startswith(f"{path}:{line}: field '{field}': ")
    assert what in str(err)


def test_missing_fields_and_broken_toml_are_reported_plainly(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match=r"job.toml: field 'run_dir': missing"):
        load_jobspec(_write(tmp_path, GOOD.replace('run_dir = "/data/runs/charlm"\n', "")))
    with pytest.raises(JobSpecError, match=r"field 'rendezvous.endpoint': missing: a job on 2"):
        parse_jobspec(GOOD.replace('endpoint = "gpu1:29400"', ""), "job.toml")
    with pytest.raises(JobSpecError, match=r"^job.toml:4: not valid TOML"):
        parse_jobspec(GOOD.replace('python = "/opt', "python = /opt"), "job.toml")
    with pytest.raises(JobSpecError, match="cannot read"):
        load_jobspec(tmp_path / "absent.toml")


def test_the_agent_rechecks_what_comes_over_the_wire() -> None:
    wire = parse_jobspec(GOOD).for_host("gpu1")
    for key, value, what in (("nproc_per_node", "4", "nproc_per_node"),
                             ("name", "../x", "cannot name a folder"),
                             ("args", ["ok", 3], "list of strings"),
                             ("node_rank", 2, "not below nnodes")):  # fmt: skip
        with pytest.raises(OpError, match=what):
            LaunchSpec({**wire, key: value})


def test_shell_metacharacters_in_names_paths_and_args_stay_data(tmp_path: Path) -> None:
    """Every command is an argv list: `;`, `$(...)`, backticks and quotes reach the
    program verbatim and nothing is executed by a shell."""
    pwned = tmp_path / "PWNED"
    evil = "x; touch PWNED; $(touch PWNED) `touch PWNED` ' \" | & > PWNED"
    run_dir = tmp_path / "run dir; touch PWNED"
    spec = parse_jobspec(textwrap.dedent(f"""\
        name = {_toml(evil)}
        hosts = ["h"]
        nproc_per_node = 1
        script = "train.py"
        args = [{_toml(evil)}, "--flag"]
        run_dir = {_toml(str(run_dir))}
        [resume]
        args = ["--resume={{checkpoint}}"]
    """))
    launch = LaunchSpec(spec.for_host("h"))
    argv = launch.argv(str(tmp_path / "ck; touch PWNED" / "c.pt"), {"k": evil})
    assert evil in argv and "--flag" in argv
    # Run the resolved command's tail through a real process, as the supervisor does.
    echo = [sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]
    out = subprocess.run([*echo, *argv[argv.index("train.py") :]], capture_output=True,
                         text=True, check=True, cwd=tmp_path)  # fmt: skip
    assert json.loads(out.stdout) == argv[argv.index("train.py") :]
    assert not pwned.exists()
    assert launch.run_dir == run_dir.resolve() and launch.name == evil


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
