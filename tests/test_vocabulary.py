"""One owner per state name: a job's states are spelt in `agent.wire.states` and a link's
in `cockpit.transport.states`, and code compares against those constants. A state retyped
as a literal (`if state == "paused"`) compiles and passes its tests until the owner's
spelling changes, and then silently never matches, so no comparison of something named
`…state` may hold a literal from either vocabulary."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.wire import states as job_states
from cockpit.transport import states as link_states
from tests.harness.ast_names import names_a

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cockpit", "agent")
# The vocabulary's own modules spell the words once, by definition.
OWNERS = {"agent/wire/states.py", "cockpit/transport/states.py"}


def _words() -> set[str]:
    return {value for module in (job_states, link_states)
            for name, value in vars(module).items()
            if name.isupper() and isinstance(value, str)}


def _names_a_state(node: ast.expr) -> bool:
    return names_a(node, "state")


def retyped(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(_names_a_state(side) for side in sides):
            continue
        for side in sides:
            if _names_a_state(side):
                continue
            found += [(node.lineno, c.value) for c in ast.walk(side)
                      if isinstance(c, ast.Constant) and c.value in words]
    return found


@pytest.mark.slow
def test_no_state_name_is_retyped_as_a_literal() -> None:
    words = _words()
    problems = []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in OWNERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        problems += [f"{rel}:{line}: {word!r}" for line, word in retyped(tree, words)]
    assert not problems, "compare against agent.wire.states / cockpit.transport.states:\n" \
        + "\n".join(problems)


def test_the_check_finds_a_retyped_state() -> None:
    """The rule can fail: each shape it knows is found, a constant's use is not."""
    words = _words()
    source = ("if job.state == 'paused': pass\n"
              "if row.get('state') in ('running', 'stalled'): pass\n"
              "if link_state != 'unreachable': pass\n"
              "if state == states.PAUSED: pass\n")
    assert [w for _, w in retyped(ast.parse(source), words)] == [
        "paused", "running", "stalled", "unreachable"]
