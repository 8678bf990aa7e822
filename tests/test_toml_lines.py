"""cockpit.toml_lines: the line of a key within its table, as the config loaders name it
in their errors; None where a key was not written, never a guess."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from cockpit.toml_lines import TomlLines, key_parts

TEXT = """\
disk_warn = 0.1          # line 1: a top-level key
[other]
disk_warn = 0.2
[alerts]
"disk\\u005fcritical" = 0.9
'lit.eral' = 1
nested.deep = { x = 1 }
[[hosts]]
name = "a"
[[hosts]]
name = "b"
[ "quoted" . sub ]  # a comment
k = 1
"""


@pytest.mark.parametrize(("path", "line"), [
    (("disk_warn",), 1),
    (("other", "disk_warn"), 3),
    (("alerts",), 4),
    (("alerts", "disk_critical"), 5),
    (("alerts", "lit.eral"), 6),
    (("alerts", "nested"), 7),
    (("alerts", "nested", "deep"), 7),
    (("alerts", "nested", "deep", "x"), 7),  # inside an inline table: the table's line
    (("alerts", "absent"), 4),  # not written: the table's line
    (("hosts",), 8),
    (("hosts", "name"), 9),  # the first of the array's tables
    (("quoted", "sub", "k"), 13),
    (("absent",), None),
    (("absent", "disk_warn"), None),
])
def test_a_key_is_found_in_its_own_table(path: tuple[str, ...], line: int | None) -> None:
    assert TomlLines(TEXT).line(*path) == line


def test_lines_end_at_newlines_only() -> None:
    text = "a = 1  # \u2028\x85\x0c\r\n[t]\r\nb = 'x\u2029'\r\nc = 2\r\n"
    lines = TomlLines(text)
    assert (lines.line("a"), lines.line("t"), lines.line("t", "c")) == (1, 2, 4)


def test_dotted_names_and_key_parts() -> None:
    assert TomlLines(TEXT).dotted("other.disk_warn") == 3
    assert key_parts('a . "b.c" . \'d\'') == ("a", "b.c", "d")
    assert key_parts('"\\u0071uit"') == ("quit",)


def test_it_imports_nothing_of_the_cockpit() -> None:
    """Every config loader, in every layer, reads its lines here: it must stay below them
    all."""
    source = Path(sys.modules[TomlLines.__module__].__file__ or "").read_text()
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "re", "sys", "tomllib", "tomli"}, imported
