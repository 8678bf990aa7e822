"""docs/getting-started.md: its inventory and job spec are read by the real parsers, and
name every key those parsers know, so the guide cannot fall behind them silently."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from cockpit.control.jobspec import _SIMPLE_KEYS, _TABLES, parse_jobspec
from cockpit.transport.inventory import _FIELDS, parse_inventory

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", GUIDE.read_text(), flags=re.S)


def _keys_written(block: str) -> set[str]:
    """Every key of `block`, commented-out ones included, as TABLE.KEY or KEY; a
    sub-table (`[recovery.per_cause]`) is itself the key TABLE.SUB."""
    keys, table = set(), ""
    for line in block.splitlines():
        line = line.strip().removeprefix("# ").strip()
        header = re.match(r"^\[\[?([a-z_.]+)\]\]?", line)
        if header:
            table = header.group(1)
            if "." in table:
                keys.add(table)
            continue
        key = re.match(r"^([A-Za-z_]+)\s*=", line)
        if key:
            keys.add(f"{table}.{key.group(1)}" if table else key.group(1))
    return keys


def test_the_inventory_parses_and_names_every_field() -> None:
    (block,) = [b for b in _toml_blocks() if "[[hosts]]" in b]
    inventory = parse_inventory(block, "getting-started.md")
    assert [h.name for h in inventory.hosts] == ["gpu1", "gpu2"]
    assert inventory.hosts[1].user == "alice"  # from [defaults]
    written = {k.split(".")[-1] for k in _keys_written(block) if k.startswith("hosts.")}
    assert written == set(_FIELDS)


def test_the_job_spec_parses_and_names_every_key() -> None:
    (block,) = [b for b in _toml_blocks() if "nproc_per_node" in b]
    spec = parse_jobspec(block, "getting-started.md", known_hosts=["gpu1", "gpu2", "gpu9"])
    assert spec.hosts == ("gpu1", "gpu2") and not spec.elastic
    written = _keys_written(block)
    assert {k for k in written if "." not in k} == _SIMPLE_KEYS
    wanted = {f"{t}.{k}" for t, keys in _TABLES.items() for k in keys}
    assert wanted <= written, wanted - written
    # The commented-out elastic keys are a valid elastic spec once uncommented (all but
    # `module`, the alternative to `script`).
    elastic = "\n".join(line.replace("# ", "", 1) if re.match(r"^# (?!module)[a-z_]+ =", line)
                        else line for line in block.splitlines())  # fmt: skip
    elastic = elastic.replace("max_restarts = 0", "max_restarts = 100")
    tomllib.loads(elastic)
    assert parse_jobspec(elastic, "elastic", known_hosts=["gpu1", "gpu2", "gpu9"]).elastic
