"""One owner per event kind: the kinds of `event` records are spelt in `agent.wire.events`,
and code that writes or compares a kind uses those constants. A kind retyped as a literal
(`if e.get("kind") == "job_exited"`, `WHERE kind = 'xid'`) compiles and passes its tests
until the writer's spelling changes, and then silently never matches; so no event kind
may appear as a literal in a comparison with something named `…kind`, as the kind an
event-emitting call or record is given, or in an SQL test of the `kind` column."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agent.wire import events
from tests.harness.ast_names import names_a

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cockpit", "agent")
OWNER = "agent/wire/events.py"  # the vocabulary's own module spells each kind once
EMITTERS = ("event", "_event")  # `job.event(KIND, …)`, `Reporter.event`, the spool's `_event`
# `kind = 'a'`, `kind <> 'a'`, `kind IN ('a', 'b')`, `kind NOT IN (…)`: the quoted words.
_SQL_TEST = re.compile(r"\bkind\s*(?:=|!=|<>)\s*'[^']*'|\bkind\s+(?:NOT\s+)?IN\s*\([^)]*\)",
                       re.IGNORECASE)
_SQL_WORD = re.compile(r"'([^']*)'")


def _kinds() -> set[str]:
    return {value for name, value in vars(events).items()
            if name.isupper() and isinstance(value, str)}


def _names_a_kind(node: ast.expr) -> bool:
    return names_a(node, "kind")


def _constants(node: ast.AST, kinds: set[str]) -> list[tuple[int, str]]:
    return [(c.lineno, c.value) for c in ast.walk(node)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in kinds]


def _callee(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def retyped(tree: ast.AST, kinds: set[str]) -> list[tuple[int, str]]:
    """(line, kind) of each event kind written as a literal where the vocabulary's
    constant belongs."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_kind(side) for side in sides):
                for side in sides:
                    if not _names_a_kind(side):
                        found += _constants(side, kinds)
        elif isinstance(node, ast.Call):
            if _callee(node) in EMITTERS and node.args:
                found += _constants(node.args[0], kinds)
            found += [hit for kw in node.keywords if kw.arg == "kind"
                      for hit in _constants(kw.value, kinds)]
        elif isinstance(node, ast.Dict):
            found += [hit for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and key.value == "kind"
                      for hit in _constants(value, kinds)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, word) for test in _SQL_TEST.findall(node.value)
                      for word in _SQL_WORD.findall(test) if word in kinds]
    return sorted(set(found))


def test_no_event_kind_is_retyped_as_a_literal() -> None:
    kinds = _kinds()
    problems = []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        # A file that neither names a kind nor calls an emitter cannot retype one.
        if rel == OWNER or ("kind" not in text and "event(" not in text):
            continue
        problems += [f"{rel}:{line}: {kind!r}"
                     for line, kind in retyped(ast.parse(text, rel), kinds)]
    assert not problems, "use the constants of agent.wire.events:\n" + "\n".join(problems)


def test_the_check_finds_a_retyped_kind() -> None:
    """The rule can fail: each shape it knows is found, a constant's use is not."""
    kinds = _kinds()
    source = (
        "if e.get('kind') == 'job_exited': pass\n"
        "if row['kind'] in ('pause', 'resume'): pass\n"
        "if event.kind != 'xid': pass\n"
        "job.event('recovery', 'msg', {})\n"
        "fields = _event('spool_error', job, rank, msg, {})\n"
        "journal.append('event', {'kind': 'sampler_error', 'job': None})\n"
        "reporter._base('event', kind='control_ack')\n"
        "cur.execute(\"SELECT 1 FROM event WHERE kind = 'fork' AND ts < ?\")\n"
        "sql = f\"WHERE kind IN ('stage', 'dropped'){cond}\"\n"
        # Not event kinds in those places, or not a kind at all: none is found.
        "if kind == events.JOB_EXITED: pass\n"
        "if action == 'pause': pass\n"
        "launch(reason='recovery')\n"
        "cur.execute(\"SELECT 1 WHERE json_extract_string(data, '$.reason') = 'resume'\")\n"
        "alert = {'kind': 'resource', 'severity': 'critical'}\n"
    )
    assert [kind for _, kind in retyped(ast.parse(source), kinds)] == [
        "job_exited", "pause", "resume", "xid", "recovery", "spool_error", "sampler_error",
        "control_ack", "fork", "dropped", "stage"]
    assert kinds >= events.AGENT_EVENT_KINDS
