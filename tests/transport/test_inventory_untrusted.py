"""Config files are untrusted input: the inventory and job-spec loaders give a config or
an error naming the file (and, for a field, its line), whatever the file holds; what
they accept cannot put an escape sequence on screen, stream one agent twice, or move
the agent's own variables (issue 25)."""

from __future__ import annotations

import string
import textwrap

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cockpit.app.operations import check_fork_target
from cockpit.control.jobspec import JobSpec, JobSpecError, parse_jobspec
from cockpit.errors import CockpitError
from cockpit.transport.inventory import (
    Inventory,
    InventoryError,
    parse_inventory,
    parse_targets,
)

SOURCE = "fleet.toml"


@pytest.mark.parametrize("address", ["\x1b]0;owned\x07gpu1", "gpu[b]1[/b]", "[@click=app.quit]"])
def test_a_name_taken_from_the_address_is_checked(address: str) -> None:
    text = f"[[hosts]]\naddress = {tomli_w.dumps({'a': address})[4:].strip()}\n"
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, SOURCE)
    message = str(caught.value)
    assert message.startswith(f"{SOURCE}:2:")
    assert "\x1b" not in message and "\x07" not in message


def test_an_ipv6_address_still_names_its_host() -> None:
    inventory = parse_inventory('[[hosts]]\naddress = "fe80::1"\n', SOURCE)
    assert inventory.hosts[0].name == "fe80::1"


def test_two_entries_for_one_agent_are_refused() -> None:
    text = textwrap.dedent("""\
        [[hosts]]
        name = "a"
        address = "10.0.0.1"

        [[hosts]]
        name = "b"
        address = "10.0.0.1"
    """)
    with pytest.raises(InventoryError, match=r"^fleet.toml:7: host #2 reaches the same agent"):
        parse_inventory(text, SOURCE)
    # Two agents on one machine (each with its own state dir) are two hosts.
    two = parse_inventory(text + 'state_dir = "~/.local/state/other-agent"\n', SOURCE)
    assert [h.name for h in two.hosts] == ["a", "b"]


def test_a_control_character_in_any_field_is_refused() -> None:
    text = '[[hosts]]\nname = "a"\naddress = "h"\nstate_dir = "/x\\u009b31m"\n'
    with pytest.raises(InventoryError, match=r"^fleet.toml:4: field 'state_dir' holds a control"):
        parse_inventory(text, SOURCE)


def test_a_command_line_target_is_a_host_name() -> None:
    with pytest.raises(InventoryError, match="bad host target"):
        parse_targets(["gpu\x1b[31m1"])


SPEC = textwrap.dedent("""\
    name = "charlm"
    hosts = ["gpu1"]
    nproc_per_node = 1
    script = "train.py"
    run_dir = "/data/runs/charlm"
""")


@pytest.mark.parametrize("key", ["COCKPIT_RUN_DIR", "COCKPIT_JOB", "COCKPIT_CHECKPOINT_DIR",
                                 "cockpit_resume_from"])
def test_env_may_not_set_the_agents_own_variables(key: str) -> None:
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(SPEC + f'\n[env]\n{key} = "/elsewhere"\n', "job.toml")
    assert caught.value.line == 8 and caught.value.field == f"env.{key}"


def test_resume_env_may_not_name_another_agent_variable() -> None:
    with pytest.raises(JobSpecError) as caught:
        parse_jobspec(SPEC + '\n[resume]\nenv = "COCKPIT_RUN_DIR"\n', "job.toml")
    assert caught.value.field == "resume.env"
    spec = parse_jobspec(SPEC + '\n[resume]\nenv = "COCKPIT_RESUME_FROM"\n', "job.toml")
    assert spec.resume_env == "COCKPIT_RESUME_FROM"


@pytest.mark.parametrize("target", ["charlm-fork-../../x", "charlm-fork-a\x1b]0;t\x07"])
def test_a_fork_target_is_a_job_name(target: str) -> None:
    spec = parse_jobspec(SPEC, "job.toml")
    with pytest.raises(CockpitError, match="--fork-of-job") as caught:
        check_fork_target(spec, target)
    assert "\x1b" not in str(caught.value)


# -- properties: any file gives a config or an error that says where -----------------

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                max_size=12)
_PLAIN = st.sampled_from(["gpu1", "gpu2", "10.0.0.1", "fe80::1", "local", "/opt/x"])
_NAMEISH = st.one_of(*[_PLAIN] * 12, st.sampled_from(["-x", "a b", "[b]"]), _TEXT)
_VALUE = st.one_of(_NAMEISH, st.integers(-2, 70000), st.booleans(),
                   st.lists(_NAMEISH, max_size=3), st.floats(allow_nan=False))
_WRONG = st.one_of(_VALUE, st.dictionaries(_TEXT, _VALUE, max_size=2))
_FIELD_VALUES = {  # each field: mostly a plausible value, sometimes anything
    "name": _NAMEISH, "address": _NAMEISH, "user": _NAMEISH,
    "port": st.integers(-1, 70000), "python": _NAMEISH, "agent": _NAMEISH,
    "state_dir": st.one_of(st.sampled_from(["~/s1", "~/s2"]), _TEXT),
    "run_dirs": st.lists(st.one_of(st.just("/data"), _TEXT), max_size=2),
    "spare": st.booleans(), "identity_file": _NAMEISH, "deploy_dir": _NAMEISH,
}
_HOST = st.fixed_dictionaries(
    {"address": _NAMEISH},
    optional={key: st.one_of(*[value] * 6, _WRONG)
              for key, value in _FIELD_VALUES.items() if key != "address"}
    | {"colour": _VALUE})
_INVENTORY = st.fixed_dictionaries(
    {"hosts": st.lists(_HOST, max_size=3)},
    optional={"defaults": st.fixed_dictionaries(
        {}, optional={k: _FIELD_VALUES[k] for k in ("port", "user", "state_dir")})})
_FUZZ = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _shows_as_text(value: str) -> bool:
    return not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in value)


@pytest.mark.slow
@_FUZZ
@given(_INVENTORY)
def test_any_inventory_gives_hosts_or_an_error_naming_the_file(data: dict) -> None:
    try:
        inventory = parse_inventory(tomli_w.dumps(data), SOURCE)
    except InventoryError as exc:
        assert str(exc).startswith(SOURCE)
        return
    assert isinstance(inventory, Inventory)
    agents = [(h.address, h.port, h.user, h.state_dir) for h in inventory.hosts]
    assert len(set(agents)) == len(agents)
    assert len({h.name for h in inventory.hosts}) == len(inventory.hosts)
    for host in inventory.hosts:
        assert host.name[0] not in "-[" and _shows_as_text(host.name)
        texts = [v for v in vars(host).values() if isinstance(v, str)] + list(host.run_dirs)
        assert all(_shows_as_text(v) for v in texts)


@_FUZZ
@given(st.text(alphabet=string.printable + "\x1b\u009b[]\"'=#", max_size=200))
def test_any_text_gives_an_inventory_or_an_error_naming_the_file(text: str) -> None:
    try:
        parse_inventory(text, SOURCE)
    except InventoryError as exc:
        assert str(exc).startswith(SOURCE)


_SPEC_KEYS = st.sampled_from(["name", "hosts", "nproc_per_node", "script", "run_dir",
                              "python", "args", "spares", "nnodes", "module", "bogus"])
_ENV = st.dictionaries(st.one_of(st.sampled_from(["HF_HOME", "DATA", "COCKPIT_RUN_DIR",
                                                  "Cockpit_Job", "1BAD"]), _TEXT),
                       st.one_of(_TEXT, _TEXT, st.integers()), max_size=2)


@_FUZZ
@given(st.dictionaries(_SPEC_KEYS, _VALUE, max_size=2), _ENV, st.booleans())
def test_any_job_spec_gives_a_spec_or_an_error_naming_file_line_and_field(
        fields: dict, env: dict, base: bool) -> None:
    data = {**(tomli_w_load(SPEC) if base else {}), **fields}
    if env:
        data["env"] = env
    try:
        spec = parse_jobspec(tomli_w.dumps(data), "job.toml")
    except JobSpecError as exc:
        assert str(exc).startswith("job.toml")
        if exc.field is not None and exc.field.split(".")[0] in data and exc.line is None:
            # A field that is in the file is found in it (one the file lacks has no line).
            assert exc.what.startswith("missing")
        return
    assert isinstance(spec, JobSpec)
    assert not any(k.upper().startswith("COCKPIT_") for k in spec.env)


def tomli_w_load(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)
