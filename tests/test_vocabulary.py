"""One owner per state name: a job's states are spelt in `agent.wire.states` and a link's
in `cockpit.transport.states`, and code compares against those constants. A state retyped
as a literal (`if state == "paused"`) compiles and passes its tests until the owner's
spelling changes, and then silently never matches, so no comparison of something named
`…state` may hold a literal from either vocabulary, and nothing named so (a variable, an
attribute, a keyword argument, a dict key) may be given one (`state = "hostkey-unknown"`)."""

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


def _word(node: ast.expr | None, words: set[str]) -> list[tuple[int, str]]:
    """The word `node` is, when it is one literally."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words:
        return [(node.lineno, node.value)]
    return []


def retyped(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if not any(_names_a_state(side) for side in sides):
                continue
            for side in sides:
                if _names_a_state(side):
                    continue
                found += [(node.lineno, c.value) for c in ast.walk(side)
                          if isinstance(c, ast.Constant) and c.value in words]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_a_state(target) for target in targets):
                found += _word(node.value, words)
        elif isinstance(node, ast.Call):
            found += [hit for kw in node.keywords if kw.arg and kw.arg.endswith("state")
                      for hit in _word(kw.value, words)]
        elif isinstance(node, ast.Dict):
            found += [hit for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and str(key.value).endswith("state")
                      for hit in _word(value, words)]
    return sorted(found)


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
              "if state == states.PAUSED: pass\n"
              "class HostKeyUnknown(HostKeyError):\n    state = 'hostkey-unknown'\n"
              "self.state: str = 'backoff'\n"
              "on_state(host, state='streaming')\n"
              "row = {'link_state': 'stale', 'note': 'stopped'}\n"
              # Not a state's place, or not a word: none is found.
              "state = states.STOPPED\n"
              "label = 'running'\n"
              "statement = {'state': 'nothing of the vocabulary'}\n")
    assert [w for _, w in retyped(ast.parse(source), words)] == [
        "paused", "running", "stalled", "unreachable", "hostkey-unknown", "backoff",
        "streaming", "stale"]
