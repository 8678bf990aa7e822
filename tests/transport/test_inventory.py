"""Inventory files and command-line targets: what is accepted, and where errors point."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.transport.inventory import (
    AUTO_AGENT,
    InventoryError,
    load_inventory,
    parse_inventory,
    parse_targets,
)

GOOD = """\
# two trainers and a spare
[defaults]
user = "train"
python = "/usr/bin/python3.10"
state_dir = "/var/lib/cockpit"
run_dirs = ["/data/runs"]

[[hosts]]
name = "gpu01"
address = "10.0.0.1"
port = 2222

[[hosts]]
address = "gpu02.cluster"   # an ~/.ssh/config alias
agent = "/opt/cockpit/bin/cockpit-agent"
user = "root"

[[hosts]]
name = "spare1"
address = "10.0.0.9"
spare = true
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(text)
    return path


def test_good_inventory_applies_defaults_and_overrides(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, GOOD))
    gpu01, gpu02, spare = inventory.hosts
    assert spare.spare and not gpu01.spare
    assert (gpu01.name, gpu01.address, gpu01.port, gpu01.user) == (
        "gpu01",
        "10.0.0.1",
        2222,
        "train",
    )
    assert gpu01.python == "/usr/bin/python3.10"
    assert gpu01.run_dirs == ("/data/runs",)
    assert gpu01.agent == AUTO_AGENT
    assert (gpu02.name, gpu02.user, gpu02.port) == ("gpu02.cluster", "root", None)
    assert gpu02.agent == "/opt/cockpit/bin/cockpit-agent"
    assert [h.name for h in inventory.active] == ["gpu01", "gpu02.cluster"]
    assert [h.name for h in inventory.spares] == ["spare1"]
    assert inventory.source.endswith("hosts.toml")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[[hosts]]\naddress = "a"\nport = "22"\n', 3, ["'port'", "integer"]),
        ('[[hosts]]\naddress = "a"\n\n[[hosts]]\naddress = "b"\nport = 70000\n', 6, ["1-65535"]),
        ('[[hosts]]\naddress = "a"\nspare = "yes"\n', 3, ["'spare'", "true or false"]),
        ('[[hosts]]\naddress = "a"\nport = true\n', 3, ["'port'"]),
        ('[[hosts]]\naddress = "a"\nadress = "b"\n', 3, ["unknown field 'adress'"]),
        ('[[hosts]]\nname = "x"\n', 1, ["no 'address'"]),
        ('[[hosts]]\naddress = "a"\n[[hosts]]\naddress = "a"\n', 4, ["duplicate host name 'a'"]),
        ('[defaults]\naddress = "a"\n[[hosts]]\naddress = "b"\n', 2, ["cannot be a default"]),
        ('[defaults]\nport = 0\n[[hosts]]\naddress = "b"\n', 2, ["1-65535"]),
        ('[[hosts]]\naddress = "a"\nrun_dirs = ["/x", 3]\n', 3, ["run_dirs"]),
        ('[[hosts]]\naddress = "a"\nname = "bad name"\n', 3, ["may hold only"]),
        ('[[hosts]]\naddress = ""\n', 2, ["'address' is empty"]),
        ('[[host]]\naddress = "a"\n', 1, ["unknown top-level key 'host'"]),
        ('[[hosts]]\naddress = "a"\n\n[hosts.extra]\nx = 1\n', 4, ["unknown field 'extra'"]),
        ('[hosts]\naddress = "a"\n', 1, ["'hosts' must be an array of tables", "[[hosts]]"]),
        ('# cluster\nhosts = "gpu-1"\n', 2,
         ["'hosts' must be an array of tables, got \"gpu-1\"", "[[hosts]]"]),
        ('[[hosts]]\naddress = "not a host"\n', 2, ["address \"not a host\"", "whitespace"]),
        ('[[hosts]]\naddress = "-oProxyCommand=touch x"\n', 2, ["start with '-'"]),
        ('[[hosts]]\naddress = "h"\nuser = "root@evil"\n', 3, ["user \"root@evil\"", "'@'"]),
        ('[[hosts]]\naddress = "h"\nuser = "-l"\n', 3, ["start with '-'"]),
        ('[defaults]\nusr = "x"\n[[hosts]]\naddress = "h"\n', 2,
         ["unknown field 'usr' in [defaults]", "known: agent, deploy_dir"]),
        ('[defaults]\nname = "x"\n[[hosts]]\naddress = "h"\n', 2, ["cannot be a default"]),
        ('[[hosts]]\naddress = "h"\nspare = "yes"\n', 3, ['got "yes"']),
        ('[[hosts]]\naddress = "h"\nport = true\n', 3, ["got true"]),
    ],
)
def test_semantic_errors_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, words: list[str]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert "True" not in message and "bool" not in message  # TOML spells it true
    for word in words:
        assert word in message


def test_syntax_error_keeps_tomllib_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '[[hosts]]\naddress = "a"\nport = = 3\n')
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{path}: invalid TOML:")
    assert "line 3" in str(caught.value)


def test_empty_and_missing_files_are_explained(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no hosts"):
        parse_inventory("[defaults]\nuser = 'x'\n", "inv.toml")
    with pytest.raises(InventoryError, match="cannot read inventory"):
        load_inventory(tmp_path / "absent.toml")


def test_command_line_targets() -> None:
    inventory = parse_targets(["root@10.0.0.1:2222", "gpu07", "me@[::1]:22"], {"python": "py3"})
    a, b, c = inventory.hosts
    assert (a.user, a.address, a.port, a.name) == ("root", "10.0.0.1", 2222, "10.0.0.1:2222")
    assert (b.user, b.address, b.port, b.name) == (None, "gpu07", None, "gpu07")
    assert (c.user, c.address, c.port) == ("me", "::1", 22)
    assert a.python == "py3"


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("a@b@c", "expected [user@]host[:port]"),
        ("host:99999", "not 1-65535"),
        ("h:x", "not 1-65535"),
        ("/tmp/cluster/inventory", "is neither an inventory file"),
        ("me@./hosts", "neither an inventory file"),
    ],
)
def test_bad_command_line_targets(target: str, words: str) -> None:
    with pytest.raises(InventoryError, match=words.replace("[", r"\[")):
        parse_targets([target])


def test_repeated_target_is_refused() -> None:
    with pytest.raises(InventoryError, match="given twice"):
        parse_targets(["h1", "h1"])


def test_one_target_that_is_a_file_is_an_inventory_whatever_its_name(tmp_path: Path) -> None:
    """`cockpit watch ~/cluster/inventory` (no suffix, or .TOML) is read as the file it
    is, never dialled as a host named after the path."""
    from cockpit.app.watch import _inventory_from
    from cockpit.errors import CockpitError

    for name in ("inventory", "INV.TOML"):
        (tmp_path / name).write_text(GOOD)
        assert _inventory_from([str(tmp_path / name)]).hosts[0].name == "gpu01"
    (tmp_path / "d.toml").mkdir()
    with pytest.raises(CockpitError, match=r"d\.toml: a directory, not an inventory file"):
        _inventory_from([str(tmp_path / "d.toml")])
    with pytest.raises(CockpitError, match=r"gone\.toml: no such inventory file"):
        _inventory_from([str(tmp_path / "gone.toml")])
    with pytest.raises(InventoryError, match="neither an inventory file"):
        _inventory_from([str(tmp_path / "gone")])


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load_inventory(path).hosts[0].name == "gpu01"


def test_two_users_on_one_host_are_two_hosts_and_options_are_not_targets() -> None:
    inv = parse_targets(["alice@h", "bob@h", "other"])
    assert [(h.name, h.user, h.address) for h in inv.hosts] == [
        ("alice@h", "alice", "h"), ("bob@h", "bob", "h"), ("other", None, "other")]
    with pytest.raises(InventoryError, match="given twice"):
        parse_targets(["alice@h", "alice@h"])
    with pytest.raises(InventoryError, match="with and without a user"):
        parse_targets(["h", "alice@h"])
    with pytest.raises(InventoryError, match="may not start with '-'"):
        parse_targets(["-oProxyCommand=x"])
