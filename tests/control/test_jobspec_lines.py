"""A job spec's errors name the line wherever it can be known: a byte that is not UTF-8,
an array of tables (`[[hang]]`) where a table belongs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.control.jobspec import JobSpecError, load_jobspec, parse_jobspec

BASE = """\
name = "j"
hosts = ["gpu1"]
nproc_per_node = 8
script = "train.py"
run_dir = "/data/runs/j"
"""


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_bytes(BASE.encode() + b'args = ["--x"]\nx = "\xff\xfe"\n')
    with pytest.raises(JobSpecError) as info:
        load_jobspec(path)
    assert (info.value.line, info.value.field) == (7, None)
    assert str(info.value).startswith(f"{path}:7: not UTF-8 text"), str(info.value)


@pytest.mark.parametrize(("text", "line"), [
    ("[[hang]]\nk = 5\n", 6),
    ("[[ recovery ]]  # twice\nbackoff = 1\n", 6),
    ("\n\n[[env]]\nA = 'x'\n", 8),
])
def test_an_array_of_tables_where_a_table_belongs_names_its_line(text: str,
                                                                 line: int) -> None:
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(BASE + text, "job.toml")
    assert info.value.line == line, str(info.value)
    assert "must be a table" in info.value.what


def test_keys_under_an_array_of_tables_are_found_there() -> None:
    # The array's own keys (`name` here) are not the top level's.
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(BASE + "[[other]]\nname = 1\n", "job.toml")
    assert (info.value.field, info.value.line) == ("other", 6), str(info.value)


def test_a_line_separator_inside_a_comment_or_string_starts_no_line() -> None:
    """TOML ends a line at a newline only; U+2028 (or U+0085, a form feed) in a comment or
    a string is text, and counting it as a line moved every error after it by one."""
    text = BASE.replace('name = "j"\n', 'name = "j"  # a\u2028b\x85c\n') + (
        'args = ["x\u2029y"]\nstop_grce = 5\n')
    with pytest.raises(JobSpecError) as info:
        parse_jobspec(text, "job.toml")
    assert (info.value.field, info.value.line) == ("stop_grce", 7), str(info.value)
