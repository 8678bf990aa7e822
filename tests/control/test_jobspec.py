"""Job specs: valid TOML becomes per-host launch specs; every mistake names file, line
and field; nothing in a spec can reach a shell."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.job.launch import LaunchSpec
from agent.wire.op_error import OpError
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
        (("nproc_per_node = 4", "nproc_per_node = 0"), 3, "nproc_per_node", "between 1 and"),
        (("nproc_per_node = 4", "nproc_per_node = 80000"), 3, "nproc_per_node",
         "between 1 and 1024"),
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
                             ("node_rank", 2, "not below nnodes"),
                             ("run_dir", "/data/x\0", "'run_dir' holds a NUL byte"),
                             ("args", ["ok", "a\0"], "'args' holds a NUL byte"),
                             ("env", {"A": "\0"}, "'env.A' holds a NUL byte"),
                             ("env", {"A=B": "x"}, "'env.A=B' is not an environment variable"),
                             ("resume", {"env": ""}, "'resume.env' must be an environment"),
                             ("hang", {"k": float("nan")}, "'hang.k' must be a finite number"),
                             ("pg_timeout", float("inf"), "'pg_timeout' must be a finite"),
                             ("pg_timeout", 10 ** 400, "must be a finite"),
                             ("nproc_per_node", 10 ** 6, "at most 1024, got 1000000")):  # fmt: skip
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


MINIMAL = textwrap.dedent("""\
    name = "job"
    hosts = ["gpu1"]
    nproc_per_node = 1
    script = "train.py"
    run_dir = "/data/runs/job"
""")


def _refused(text: str) -> JobSpecError:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(text, "job.toml")
    return info.value


@pytest.mark.parametrize("setting", [
    "pg_timeout = inf", "pause_timeout = nan", "stop_grace = inf", "[hang]\nk = nan",
    "[hang]\nfloor = inf", "[hang]\nstartup = -inf", "[recovery]\nbackoff = nan",
    "[recovery]\nbackoff_max = inf",
])
def test_nan_and_inf_are_refused_with_the_field(setting: str) -> None:
    err = _refused(MINIMAL + setting + "\n")
    field = setting.replace("[", "").replace("]\n", ".").split(" =")[0]
    assert str(err) == f"job.toml:{MINIMAL.count(chr(10)) + setting.count(chr(10)) + 1}: " \
                       f"field '{field}': must be a finite number"


@pytest.mark.parametrize(("setting", "field"), [
    ('script = "train\\u0000.py"', "script"), ('python = "py\\u0000"', "python"),
    ('args = ["--x", "a\\u0000"]', "args"), ('[env]\nA = "\\u0000"', "env.A"),
    ('[resume]\nargs = ["--resume", "{checkpoint}\\u0000"]', "resume.args"),
])
def test_a_nul_byte_in_any_string_is_refused_with_the_field(setting: str, field: str) -> None:
    """The agent cannot start a process with one: without this the launch was accepted
    and the job then failed or hung in "starting" with a bare "embedded null byte"."""
    text = MINIMAL.replace('script = "train.py"\n', "") if field == "script" else MINIMAL
    err = _refused(text + setting + "\n")
    assert (err.field, err.line) == (field, text.count("\n") + setting.count("\n") + 1)
    assert err.what.startswith("holds a NUL byte"), str(err)


def test_an_integer_too_large_for_a_number_is_refused_not_a_traceback() -> None:
    err = _refused(MINIMAL + f"pg_timeout = {'9' * 400}\n")
    assert (err.field, err.what) == ("pg_timeout", "must be a finite number")


@pytest.mark.parametrize(("setting", "field", "what"), [
    ('name = " "', "name", "must be a non-empty string"),
    (f'name = "{"a" * 129}"', "name", "longer than 128 characters"),
    ('name = "a\\nb"', "name", "control character"),
    ('python = ""', "python", "not be empty"),
    ('checkpoint_dir = ""', "checkpoint_dir", "must not be empty"),
    ('workdir = " "', "workdir", "must not be empty"),
    ('run_dir = "runs/job"', "run_dir", "'runs/job' is relative"),
    ('hosts = ["a/b"]', "hosts", "cannot name a folder"),
    ("pg_timeout = 0.5", "pg_timeout", "at least 1"),
    ("pause_timeout = 0.01", "pause_timeout", "at least 0.1"),
    ("[hang]\nk = 0.0001", "hang.k", "at least 0.001"),
])
def test_what_the_agent_would_refuse_is_refused_here_with_file_and_line(
        setting: str, field: str, what: str) -> None:
    text = MINIMAL.replace('name = "job"\n', "") if setting.startswith("name") else MINIMAL
    text = text.replace('hosts = ["gpu1"]\n', "") if setting.startswith("hosts") else text
    text = text.replace('run_dir = "/data/runs/job"\n', "") if setting.startswith(
        "run_dir") else text
    err = _refused(text + setting + "\n")
    assert err.field == field and err.line is not None and what in err.what, str(err)


def test_module_true_runs_the_script_as_a_module() -> None:
    assert parse_jobspec(MINIMAL + "module = true\n").module is True
    assert parse_jobspec(MINIMAL + "module = false\n").module is False
    spec = parse_jobspec(MINIMAL.replace('script = "train.py"', 'module = "pkg.train"'))
    assert (spec.module, spec.script) == (True, "pkg.train")
    assert "--module" in LaunchSpec(spec.for_host("gpu1")).argv()


def test_the_rendezvous_id_is_the_name_and_backends_are_torchruns() -> None:
    err = _refused(MINIMAL + '[rendezvous]\nid = "other"\n')
    assert (err.line, err.field) == (7, "rendezvous.id") and "job's name" in err.what
    err = _refused(MINIMAL + '[rendezvous]\nbackend = "zookeeper"\n')
    assert err.field == "rendezvous.backend"
    assert "known: c10d, etcd, etcd-v2, static" in err.what
    assert parse_jobspec(MINIMAL + '[rendezvous]\nbackend = "etcd"\n'
                         ).for_host("gpu1")["rendezvous"]["backend"] == "etcd"
    elastic = MINIMAL + ('nnodes = "1:2"\n[resume]\nnewest_args = []\n[rendezvous]\n'
                         'endpoint = "gpu1:29400"\nbackend = "etcd"\n')
    assert "c10d" in _refused(elastic).what


@pytest.mark.parametrize(("setting", "field", "what"), [
    ('override_args = ["--set"]', "override_args", "must contain {key} and {value}"),
    ("override_args = []", "override_args", "must contain {key} and {value}"),
    ('override_args = "--set {key}"', "override_args", "must contain {value}"),
    ('override_args = "--set {key}={value"', "override_args", "must contain {value}"),
    ('override_args = ["--{key}", "{value}}"]', "override_args", "not part of {key} or"),
    ('override_args = ["--set", "{key}={value}", "{step}"]', "override_args", "not part of"),
    ('[rendezvous]\nendpoint = "local:99999"', "rendezvous.endpoint", "port 99999 is not 1-"),
    ('[rendezvous]\nendpoint = "local:0"', "rendezvous.endpoint", "port 0 is not 1-65535"),
    ('[rendezvous]\nendpoint = "[::1]:29400"', "rendezvous.endpoint", "IPv6 literals are not"),
    ('[rendezvous]\nendpoint = "local"', "rendezvous.endpoint", "must be HOST:PORT"),
])
def test_override_templates_and_endpoints_are_checked(setting: str, field: str,
                                                      what: str) -> None:
    """A template must place {key} and {value} (or a fork's override is lost); an
    endpoint's port must be one a store can listen on."""
    err = _refused(MINIMAL + setting + "\n")
    line = 6 + setting.count("\n")
    assert (err.line, err.field) == (line, field) and what in err.what, str(err)


def test_override_templates_that_place_both_are_kept() -> None:
    spec = parse_jobspec(MINIMAL + 'override_args = ["--{key}", "{value}"]\n')
    argv = LaunchSpec(spec.for_host("gpu1")).argv(None, {"lr": 0.1})
    assert argv[-2:] == ["--lr", "0.1"]


def test_type_errors_spell_values_as_toml_and_dotted_keys_have_lines() -> None:
    err = _refused(MINIMAL.replace('hosts = ["gpu1"]', 'hosts = ["gpu1", "gpu2"]')
                   + "nnodes = true\n")
    assert err.what.endswith("got true") and "True" not in str(err)
    err = _refused(MINIMAL + "hang.floor = -5\n")
    assert (err.line, err.field) == (6, "hang.floor")
    err = _refused(MINIMAL + '[recovery]\nexclude_on = ["gpu_fault", true]\n')
    assert "True" not in str(err)


def test_a_byte_order_mark_is_not_a_toml_error(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_jobspec(path).name == "job"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.replace("= 1", "= 0").encode())
    with pytest.raises(JobSpecError, match=r"job.toml:3: field 'nproc_per_node'"):
        load_jobspec(path)
