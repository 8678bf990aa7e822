"""Every number of a job spec has a greatest value (agent.wire.launch_spec.MAXIMUM), which
the cockpit's check refuses past with the file, the line and the field, and the agent's
check refuses again; a value at the bound is taken by both and works where it is used.

Without them `stop_grace = 1e10` passed both checks and then overflowed the agent's wait
for the job to exit (threading.TIMEOUT_MAX), so SIGKILL was never sent; `last_call` and
`max_restarts` reached torchrun as numbers it cannot take, `pg_timeout` became a
301-digit environment variable."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agent.daemon import MAX_STOP_GRACE
from agent.job.launch import LaunchSpec
from agent.job.recovery import Diagnosis, RecoveryPolicy
from agent.wire.launch_spec import DEFAULTS, MAXIMUM, MINIMUM
from agent.wire.op_error import OpError
from cockpit.control.jobspec import JobSpecError, load_jobspec, parse_jobspec
from tests.control.test_jobspec_lines import BASE  # the smallest valid spec

# An elastic job, for the rendezvous fields only it may set.
ELASTIC = BASE.replace('hosts = ["gpu1"]\n', 'hosts = ["gpu1"]\nnnodes = "1:2"\n') + (
    '[resume]\nnewest_args = []\n[rendezvous]\nendpoint = "gpu1:29400"\n')

HUGE = 10 ** 30
# (the text that sets it, the field, its line in BASE + the text)
TOO_LARGE = [
    (f"max_restarts = {HUGE}", "max_restarts", 6),
    (f"[recovery]\nrestart_budget = {HUGE}", "recovery.restart_budget", 7),
    (f"[recovery.per_cause]\noom = {HUGE}", "recovery.per_cause.oom", 7),
    ("stop_grace = 1e10", "stop_grace", 6),
    ("stop_grace = 86401", "stop_grace", 6),
    ("pg_timeout = 1e300", "pg_timeout", 6),
    ("pause_timeout = 1e12", "pause_timeout", 6),
    ("[recovery]\nbackoff = 1e300\nbackoff_max = 1e308", "recovery.backoff", 7),
    ("[recovery]\nbackoff_max = 1e308", "recovery.backoff_max", 7),
    ("[recovery]\nwindow = 1e20", "recovery.window", 7),
    ("[hang]\nk = 1e20", "hang.k", 7),
    ("[hang]\nstartup = 1e20", "hang.startup", 7),
]


def _refused(text: str) -> JobSpecError:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(text, "job.toml")
    return info.value


@pytest.mark.parametrize(("setting", "field", "line"), TOO_LARGE)
def test_a_number_past_its_maximum_is_refused_with_file_line_and_field(
        setting: str, field: str, line: int) -> None:
    err = _refused(BASE + setting + "\n")
    most = MAXIMUM[field.removesuffix(".oom")]
    assert (err.field, err.line) == (field, line), str(err)
    assert str(err).startswith(f"job.toml:{line}: field '{field}': must be at most {most:g}"
                               ), str(err)


@pytest.mark.parametrize(("setting", "field", "line"), [
    (f"last_call = {10 ** 26}", "rendezvous.last_call", 11),
    (f"keep_alive = {10 ** 23}", "rendezvous.keep_alive", 11),
])
def test_the_rendezvous_times_are_bounded(setting: str, field: str, line: int) -> None:
    err = _refused(ELASTIC + setting + "\n")
    assert (err.field, err.line) == (field, line), str(err)
    assert f"must be at most {MAXIMUM[field]:g}" in err.what


def test_the_most_nodes_an_elastic_job_may_grow_to_is_bounded() -> None:
    err = _refused(ELASTIC.replace('"1:2"', '"1:100000000000000000000000"'))
    assert (err.field, err.line) == ("nnodes", 3), str(err)
    assert f"at most {MAXIMUM['nnodes']:g}" in err.what


def test_a_file_past_a_maximum_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(BASE + "stop_grace = 1e10\n")
    with pytest.raises(JobSpecError) as info:
        load_jobspec(path)
    assert str(info.value) == (f"{path}:6: field 'stop_grace': must be at most "
                               f"{MAXIMUM['stop_grace']:g}, got 1e+10")


def _wire() -> dict[str, Any]:
    return parse_jobspec(BASE).for_host("gpu1")


def _elastic_wire() -> dict[str, Any]:
    return parse_jobspec(ELASTIC).for_host("gpu1")


@pytest.mark.parametrize(("change", "name"), [
    ({"max_restarts": HUGE}, "max_restarts"),
    ({"stop_grace": 1e10}, "stop_grace"),
    ({"pg_timeout": 1e300}, "pg_timeout"),
    ({"pause_timeout": 1e12}, "pause_timeout"),
    ({"node_rank": HUGE}, "node_rank"),
    ({"recovery": {"restart_budget": HUGE}}, "recovery.restart_budget"),
    ({"recovery": {"backoff": 1e300, "backoff_max": 1e308}}, "recovery.backoff"),
    ({"recovery": {"window": 1e20}}, "recovery.window"),
    ({"recovery": {"per_cause": {"oom": HUGE}}}, "recovery.per_cause.oom"),
    ({"hang": {"k": 1e20}}, "hang.k"),
    ({"hang": {"floor": 1e20}}, "hang.floor"),
    ({"hang": {"startup": 1e20}}, "hang.startup"),
])
def test_the_agent_refuses_what_is_past_a_maximum(change: dict[str, Any], name: str) -> None:
    """A spec reaches the agent over a channel (and from older cockpits): it checks the
    bounds again, and says which field, as the op's refusal."""
    with pytest.raises(OpError, match=rf"'{name}'.*at most") as info:
        LaunchSpec({**_wire(), **change})
    assert "Overflow" not in str(info.value)


@pytest.mark.parametrize(("change", "name"), [
    ({"nnodes": "1:100000000000000000000000"}, "nnodes"),
    ({"nnodes": f"1:{int(MAXIMUM['nnodes']) + 1}"}, "nnodes"),
    ({"rendezvous": {"endpoint": "gpu1:29400", "last_call": 10 ** 26}},
     "rendezvous.last_call"),
    ({"rendezvous": {"endpoint": "gpu1:29400", "keep_alive": 10 ** 23}},
     "rendezvous.keep_alive"),
])
def test_the_agent_refuses_an_elastic_job_past_a_maximum(change: dict[str, Any],
                                                         name: str) -> None:
    with pytest.raises(OpError, match=rf"'{name}'.*at most"):
        LaunchSpec({**_elastic_wire(), **change})


def test_a_fixed_size_job_of_more_nodes_than_the_maximum_is_refused_by_the_agent() -> None:
    with pytest.raises(OpError, match=r"'nnodes'.*at most"):
        LaunchSpec({**_wire(), "nnodes": HUGE})


def _at_the_bounds() -> str:
    most = {name: (int(v) if float(v).is_integer() else v) for name, v in MAXIMUM.items()}
    return BASE.replace("nproc_per_node = 8", f"nproc_per_node = {most['nproc_per_node']}"
                        ) + (
        f"max_restarts = {most['max_restarts']}\n"
        f"pg_timeout = {most['pg_timeout']}\npause_timeout = {most['pause_timeout']}\n"
        f"stop_grace = {most['stop_grace']}\n"
        f"[recovery]\nrestart_budget = {most['recovery.restart_budget']}\n"
        f"backoff = {most['recovery.backoff']}\nbackoff_max = {most['recovery.backoff_max']}\n"
        f"window = {most['recovery.window']}\n"
        f"[recovery.per_cause]\noom = {most['recovery.per_cause']}\n"
        f"[hang]\nk = {most['hang.k']}\nfloor = {most['hang.floor'] - 1}\n"
        f"startup = {most['hang.startup']}\n")


def test_the_maximums_are_taken_by_both_sides_and_work_where_they_are_used() -> None:
    spec = parse_jobspec(_at_the_bounds())
    launch = LaunchSpec(spec.for_host("gpu1"))
    assert launch.stop_grace == spec.stop_grace == MAXIMUM["stop_grace"]
    # The agent's waits for a stopped job (grace, then grace + 5 s after SIGKILL).
    assert launch.stop_grace + 5.0 < threading.TIMEOUT_MAX
    # The stop op checks a managed job's own grace against the daemon's bound.
    assert MAXIMUM["stop_grace"] <= MAX_STOP_GRACE
    env = launch.environment()
    assert env["COCKPIT_PG_TIMEOUT"] == "86400"
    assert env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "86400"
    argv = launch.argv()
    assert argv[argv.index("--max-restarts") + 1] == str(int(MAXIMUM["max_restarts"]))
    # torchrun's rendezvous: the last call must end within its join timeout (600 s, which
    # the agent leaves at its default), and three missed heartbeats too.
    assert MAXIMUM["rendezvous.last_call"] < 600
    assert 3 * MAXIMUM["rendezvous.keep_alive"] < 600


def test_the_elastic_maximums_are_taken_by_both_sides() -> None:
    text = ELASTIC.replace('"1:2"', f'"1:{int(MAXIMUM["nnodes"])}"') + (
        f"last_call = {int(MAXIMUM['rendezvous.last_call'])}\n"
        f"keep_alive = {int(MAXIMUM['rendezvous.keep_alive'])}\n")
    launch = LaunchSpec(parse_jobspec(text).for_host("gpu1"))
    assert launch.max_nodes == MAXIMUM["nnodes"]
    assert dict(launch.rdzv_conf()) == {
        "is_host": "1", "last_call_timeout": str(int(MAXIMUM["rendezvous.last_call"])),
        "keep_alive_interval": str(int(MAXIMUM["rendezvous.keep_alive"]))}


def test_the_largest_restart_budget_backs_off_without_overflowing() -> None:
    """The back-off doubles per failure in a row (backoff × 2**streak, capped): past
    about 1023 failures in a row that product is no float, so the budget stays below."""
    policy = RecoveryPolicy(int(MAXIMUM["recovery.restart_budget"]),
                            MAXIMUM["recovery.backoff"], MAXIMUM["recovery.backoff_max"],
                            repeat_limits={})
    for _ in range(int(MAXIMUM["recovery.restart_budget"])):
        decision = policy.decide(Diagnosis("unknown", []))
        assert decision.retry and decision.delay <= MAXIMUM["recovery.backoff_max"]
    assert not policy.decide(Diagnosis("unknown", [])).retry


def test_every_number_with_a_least_value_has_a_greatest_one() -> None:
    assert set(MINIMUM) <= set(MAXIMUM)
    for name, most in MAXIMUM.items():
        assert MINIMUM.get(name, 0) < most, name
        default = DEFAULTS.get(name)
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert default <= most, name


def test_the_docs_state_each_maximum() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "control.md").read_text()
    for name, most in MAXIMUM.items():
        assert f"`{name}` ≤ {most:,.0f}" in doc, name
