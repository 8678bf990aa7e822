"""One owner per control-op name: the `"op"` of a control op the cockpit sends and the
agent dispatches on is spelt in `agent.wire.ops`, and code that writes, dispatches on or
compares an op name uses those constants. A name retyped as a literal (`{"op": "pause"}`,
`if action == "stop"`) compiles and passes its tests until one side's spelling changes,
and then the op is refused as unknown, or one branch silently never runs; so no op name
may appear as a literal:

- as the value of an `"op"` key in a dict literal (the op as it is sent, or acked);
- compared (`==`, `!=`, `in`, `not in`) with something named `…op`, `…action` or
  `…command` (`op`, `entry["action"]`, `args.command`, `entry.get("op")`);
- as the op an operation is asked for, described or refused by: the first argument of
  `request_operation` (the screen), `_each` (the controller's send), `request` (a
  managed job's queue), `Operation` (the screen's table of them), `MembershipChange`
  (the change an op makes), `describe` (a controller's account of it), `refuses` and
  `_refused` (a controller that does not offer it), the second of `_not_offered`;
- as a key of the handler table given to `ControlInbox` (the agent's dispatch).

Equal words of other vocabularies stay as they are (an event kind, a launch reason, the
`jobs` table of the store, an `applies_at` of "resume"), and the screen's own operations
that are no op ("checkpoint", "eval", "freeze") are no op names either."""

from __future__ import annotations

import ast
from pathlib import Path

from agent.wire import ops
from tests.harness.ast_names import names_a

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cockpit", "agent")
OWNER = "agent/wire/ops.py"  # the vocabulary's own module spells each name once
NAMED = ("op", "action", "command")  # compared with one of these, a literal is an op name
# callee -> the position of its argument that names the op
ASKERS = {"request_operation": 0, "_each": 0, "request": 0, "Operation": 0,
          "MembershipChange": 0, "describe": 0, "refuses": 0, "_refused": 0, "_not_offered": 1}
DISPATCHERS = ("ControlInbox",)  # given a dict of op name -> handler


def _names() -> set[str]:
    return {value for name, value in vars(ops).items()
            if name.isupper() and isinstance(value, str)}


def _names_an_op(node: ast.expr) -> bool:
    return any(names_a(node, suffix) for suffix in NAMED)


def _constants(node: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    return [(c.lineno, c.value) for c in ast.walk(node)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in names]


def _callee(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def retyped(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each op name written as a literal where `agent.wire.ops`'
    constant belongs."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_an_op(side) for side in sides):
                found += [hit for side in sides if not _names_an_op(side)
                          for hit in _constants(side, names)]
        elif isinstance(node, ast.Call):
            callee = _callee(node)
            if callee in ASKERS and len(node.args) > ASKERS[callee]:
                found += _constants(node.args[ASKERS[callee]], names)
            elif callee in DISPATCHERS:
                found += [hit for arg in (*node.args, *(kw.value for kw in node.keywords))
                          if isinstance(arg, ast.Dict)
                          for key in arg.keys if key is not None
                          for hit in _constants(key, names)]
        elif isinstance(node, ast.Dict):
            found += [hit for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and key.value == "op"
                      for hit in _constants(value, names)]
    return sorted(set(found))


def test_no_op_name_is_retyped_as_a_literal() -> None:
    names = _names()
    problems = []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == OWNER:
            continue
        problems += [f"{rel}:{line}: {name!r}" for line, name in
                     retyped(ast.parse(path.read_text(encoding="utf-8"), rel), names)]
    assert not problems, "use the constants of agent.wire.ops:\n" + "\n".join(problems)


def test_the_check_finds_a_retyped_op_name() -> None:
    """The rule can fail: each shape it knows is found, a constant's use is not."""
    source = (
        "session.fleet.send(host, {'op': 'jobs', 'id': op_id})\n"
        "if entry.get('op') != 'adjust': pass\n"
        "if op in ('launch', 'fork'): pass\n"
        "if args.command == 'relaunch': pass\n"
        "begun = next(e for e in accepted if e['action'] == 'thaw')\n"
        "if 'stop' not in action: pass\n"
        "self.request_operation('resume')\n"
        "self._each('scale', ops)\n"
        "return self._managed(op).request('pause', args)\n"
        "Operation('ping', 'Ping', False, call)\n"
        "MembershipChange('sim_xid', {}, hosts)\n"
        "text = controller.describe('scale', add=host)\n"
        "if self._not_offered(controller, 'fork'): pass\n"
        "inbox = ControlInbox(journal, {'ping': on_ping, ops.STOP: on_stop})\n"
        # Not an op name's place, or its constant: none is found.
        "if action == ops.PAUSE: pass\n"
        "self._each(ops.LAUNCH, ops)\n"
        "self.event(PAUSE, msg, {'mode': 'thaw', 'reason': why})\n"
        "if kind == 'pause': pass\n"
        "ack = {'op': op, 'ok': True}\n"
        "jobs = data.get('jobs') or []\n"
        "controller.describe('freeze' if freeze else action)\n"
        "launch(reason='resume')\n"
    )
    assert [name for _, name in retyped(ast.parse(source), _names())] == [
        "jobs", "adjust", "fork", "launch", "relaunch", "thaw", "stop", "resume", "scale",
        "pause", "ping", "sim_xid", "scale", "fork", "ping"]
    assert set(ops.OPS) == _names()


def test_the_groups_are_of_the_owners_names() -> None:
    assert len(set(ops.OPS)) == len(ops.OPS)
    for group in (ops.ACCEPTED_OPS, ops.JOB_OPERATIONS, ops.SLURM_OPERATIONS):
        assert set(group) <= set(ops.OPS)
    assert set(ops.SLURM_OPERATIONS) <= set(ops.JOB_OPERATIONS)


def test_the_agent_dispatches_every_op() -> None:
    """`ops.OPS` is what the daemon's handler table names: an op added to one and not to
    the other is refused by the agent, or never sent."""
    tree = ast.parse((ROOT / "agent/daemon.py").read_text(encoding="utf-8"))
    tables = [arg for node in ast.walk(tree) if isinstance(node, ast.Call)
              and _callee(node) in DISPATCHERS for arg in node.args if isinstance(arg, ast.Dict)]
    assert len(tables) == 1
    keys = tables[0].keys
    assert all(isinstance(k, ast.Attribute) and isinstance(k.value, ast.Name)
               and k.value.id == "ops" for k in keys)
    handled = [getattr(ops, k.attr) for k in keys if isinstance(k, ast.Attribute)]
    assert sorted(handled) == sorted(ops.OPS)
