"""One owner per event kind: the kinds of `event` records are spelt in `agent.wire.events`,
and code that writes or compares a kind uses those constants. A kind retyped as a literal
(`if e.get("kind") == "job_exited"`, `WHERE kind = 'xid'`) compiles and passes its tests
until the writer's spelling changes, and then silently never matches; so no event kind
may appear as a literal in a comparison with something named `…kind`, as the kind an
event-emitting call or record is given, or in an SQL test of the `kind` column.

The same holds for the words inside an event that say why a job's part started or ended
(`agent.wire.launch_reasons`) and for the record types themselves (`agent.wire.protocol`):
their guards follow the event kinds' below."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agent.job import supervisor
from agent.wire import events, launch_reasons, protocol
from cockpit.analysis import markers, timeline
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


# -- the words an event carries: why a part started, why the agent ended it ----------------
# `job_started`'s `data.reason` and `job_exited`'s `data.ended_for` are spelt in
# `agent.wire.launch_reasons`: no literal of them may be compared with something named
# `…reason` or `…ended_for`, given to one (a variable, attribute, keyword or dict key; a
# stop's `why=`), be the default of a parameter so named (`reason="launch"`), or tested in
# SQL (`json_extract_string(data, '$.reason') = 'launch'`).
REASONS_OWNER = "agent/wire/launch_reasons.py"
REASON_FIELDS = ("reason", "ended_for")
REASON_KEYWORDS = (*REASON_FIELDS, "why")
# Files that still spell the reasons they write, left for whoever edits them next to
# import `agent.wire.launch_reasons`: each must still hold one (a switched file leaves).
REASONS_PENDING: set[str] = set()
_SQL_REASON = re.compile(r"'\$\.(?:reason|ended_for)'\)\s*(?:=|!=|<>)\s*'([^']*)'"
                         r"|'\$\.(?:reason|ended_for)'\)\s+(?:NOT\s+)?IN\s*\(([^)]*)\)",
                         re.IGNORECASE)


def _reasons() -> set[str]:
    return {value for name, value in vars(launch_reasons).items()
            if name.isupper() and isinstance(value, str)}


def _names_a_reason(node: ast.expr | None) -> bool:
    return node is not None and any(names_a(node, field) for field in REASON_FIELDS)


def retyped_reasons(tree: ast.AST, reasons: set[str]) -> list[tuple[int, str]]:
    """(line, word) of each launch reason or end cause written as a literal."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_reason(side) for side in sides):
                found += [hit for side in sides if not _names_a_reason(side)
                          for hit in _constants(side, reasons)]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_names_a_reason(t) for t in targets):
                found += _constants(node.value, reasons)
        elif isinstance(node, ast.Call):
            found += [hit for kw in node.keywords if kw.arg in REASON_KEYWORDS
                      for hit in _constants(kw.value, reasons)]
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            defaults = [*zip(positional[len(positional) - len(node.defaults):], node.defaults,
                             strict=True),
                        *zip(node.kwonlyargs, node.kw_defaults, strict=True)]
            found += [hit for arg, default in defaults
                      if default is not None and arg.arg in REASON_KEYWORDS
                      for hit in _constants(default, reasons)]
        elif isinstance(node, ast.Dict):
            found += [hit for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and key.value in REASON_FIELDS
                      for hit in _constants(value, reasons)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, word) for one, many in _SQL_REASON.findall(node.value)
                      for word in [one, *_SQL_WORD.findall(many)] if word in reasons]
    return sorted(set(found))


def test_no_launch_reason_is_retyped_as_a_literal() -> None:
    reasons = _reasons()
    problems, switched = [], []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel == REASONS_OWNER or not any(f in text for f in (*REASON_KEYWORDS, "$.")):
            continue
        found = [f"{rel}:{line}: {word!r}"
                 for line, word in retyped_reasons(ast.parse(text, rel), reasons)]
        if rel in REASONS_PENDING:
            switched += [] if found else [rel]
        else:
            problems += found
    assert not problems, "use the constants of agent.wire.launch_reasons:\n" + "\n".join(
        problems)
    assert not switched, f"no longer spells a reason: take it out of REASONS_PENDING: {switched}"


def test_the_check_finds_a_retyped_reason() -> None:
    reasons = _reasons()
    source = (
        "if data.get('reason') == 'recovery': pass\n"
        "if e['data']['ended_for'] in ('stop', 'scale'): pass\n"
        "self.launch(checkpoint, reason='resume')\n"
        "self.stop_attempt(why='relaunch')\n"
        "sup.ended_for = 'shutdown'\n"
        "started = {'attempt': 1, 'reason': 'takeover'}\n"
        "sql = \"AND json_extract_string(data, '$.reason') = 'launch' \"\n"
        "sql = \"json_extract_string(data, '$.ended_for') IN ('peer', 'pause')\"\n"
        "def launch(self, checkpoint, reason='recovery'): pass\n"
        "def stopped(was, *, why='stop'): pass\n"
        # Not a reason's place, or not a reason: none is found.
        "if data.get('reason') == launch_reasons.RECOVERY: pass\n"
        "reason = 'disk full' if full else 'write error'\n"
        "if action == 'resume': pass\n"
        "self.event(RESUME, msg, {'mode': 'thaw', 'reason': why})\n"
        "def thaw(self, mode='resume', why=None): pass\n"
    )
    assert [word for _, word in retyped_reasons(ast.parse(source), reasons)] == [
        "recovery", "scale", "stop", "resume", "relaunch", "shutdown", "takeover", "launch",
        "pause", "peer", "recovery", "stop"]
    assert set(launch_reasons.OPERATOR_STARTS) | set(launch_reasons.RUN_STARTS) <= set(
        launch_reasons.LAUNCH_REASONS)
    assert set(launch_reasons.OUTAGE_ENDS) <= set(launch_reasons.ENDED_FOR)
    # The supervisor's words for each end are of the owner's causes, and name them all.
    assert set(supervisor.ENDED_FOR) == set(launch_reasons.ENDED_FOR)


# -- record types: a record's `t` ----------------------------------------------------------
# Spelt in `agent.wire.protocol` (the types, the stream and spool headers): no literal of
# them may be compared with a record's `t`, be a record dict's `"t"`, be the type an
# `encode(T, …)`, a journal's `append(T, fields)` or the hook's `_base(T, …)` is given, or
# head a record's tuple (`(T, fields)` for `append_many`, a held `(T, ts, line)`): a tuple
# whose first item is a type and whose second is no string (a row of column names is not
# a record).
RECORDS_OWNER = "agent/wire/protocol.py"
RECORD_WRITERS = ("encode", "_base")  # and `append` with the fields after the type
# Files that still spell the record types they write or read, left for whoever edits
# them next to import `agent.wire.protocol`: each must still hold one.
RECORDS_PENDING: set[str] = set()


def _record_types() -> set[str]:
    return {*protocol.RECORD_TYPES, protocol.STREAM_HEADER, protocol.SPOOL_HEADER}


def _is_t(node: ast.expr) -> bool:
    """`t`, `record["t"]`, `record.get("t")`: a record's type (exactly `t`, not `…t`)."""
    if isinstance(node, ast.Name):
        return node.id == "t"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "t"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and bool(node.args)
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == "t")


def retyped_types(tree: ast.AST, types: set[str]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_t(side) for side in sides):
                found += [hit for side in sides if not _is_t(side)
                          for hit in _constants(side, types)]
        elif isinstance(node, ast.Dict):
            found += [hit for key, value in zip(node.keys, node.values, strict=True)
                      if isinstance(key, ast.Constant) and key.value == "t"
                      for hit in _constants(value, types)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            callee = _callee(node)
            if callee in RECORD_WRITERS or (callee == "append" and len(node.args) >= 2):
                found += _constants(node.args[0], types)
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 2 and (
                isinstance(node.elts[0], ast.Constant)) and not (
                isinstance(node.elts[1], ast.Constant) and isinstance(node.elts[1].value, str)):
            found += _constants(node.elts[0], types)
    return sorted(set(found))


def test_no_record_type_is_retyped_as_a_literal() -> None:
    types = _record_types()
    problems, switched = [], []
    for path in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == RECORDS_OWNER:
            continue
        found = [f"{rel}:{line}: {t!r}" for line, t in
                 retyped_types(ast.parse(path.read_text(encoding="utf-8"), rel), types)]
        if rel in RECORDS_PENDING:
            switched += [] if found else [rel]
        else:
            problems += found
    assert not problems, "use the constants of agent.wire.protocol:\n" + "\n".join(problems)
    assert not switched, f"no longer spells a type: take it out of RECORDS_PENDING: {switched}"


def test_the_check_finds_a_retyped_record_type() -> None:
    types = _record_types()
    source = (
        "if header.get('t') == 'stream': pass\n"
        "if t in ('train', 'eval'): pass\n"
        "record = {'t': 'spool', 'v': 1}\n"
        "chunk = encode('event', seq, fields)\n"
        "journal.append('hello', fields)\n"
        "self._base('log', line=text)\n"
        "journal.append_many([('gpu', sample), ('host', {'cpu': 1})])\n"
        "held = ('alert', ts, encode(ALERT, seq, fields))\n"
        # Not a record type's place: none is found.
        "if t == protocol.STREAM_HEADER: pass\n"
        "hosts.append('host')\n"
        "if last == 'run': pass\n"
        "row = {'kind': 'gpu'}\n"
        "columns = ('host', 'gpu', 'state')\n"
        "records.append((GPU, sample))\n"
    )
    assert [t for _, t in retyped_types(ast.parse(source), types)] == [
        "stream", "eval", "train", "spool", "event", "hello", "log", "gpu", "host", "alert"]


# -- the cockpit's chart marks and stages ------------------------------------------------
# A marker's and a fault mark's kind (`cockpit.analysis.markers`, `…timeline`) and a
# stage's name (`…timeline.STAGES`): compared with something named `…kind` or `…stage`, or
# given to a `Marker`, `Fault` or `StageSpan`, only as those modules' constants.
MARKS_OWNERS = {"cockpit/analysis/markers.py", "cockpit/analysis/timeline.py"}
MARK_BUILDERS = ("Marker", "Fault", "StageSpan")


def _marks() -> set[str]:
    return {markers.RESTART, markers.ADJUST, *timeline.FAULT_KINDS, *timeline.STAGES}


def retyped_marks(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for suffix in ("kind", "stage"):
                if any(names_a(side, suffix) for side in sides):
                    found += [hit for side in sides if not names_a(side, suffix)
                              for hit in _constants(side, words)]
        elif isinstance(node, ast.Call) and _callee(node) in MARK_BUILDERS:
            found += [hit for arg in (*node.args, *(kw.value for kw in node.keywords
                                                    if kw.arg in ("kind", "stage")))
                      if isinstance(arg, ast.Constant) for hit in _constants(arg, words)]
    return sorted(set(found))


def test_no_mark_or_stage_is_retyped_as_a_literal() -> None:
    words = _marks()
    problems = []
    for path in sorted((ROOT / "cockpit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in MARKS_OWNERS:
            continue
        problems += [f"{rel}:{line}: {word!r}" for line, word in
                     retyped_marks(ast.parse(path.read_text(encoding="utf-8"), rel), words)]
    assert not problems, ("use the constants of cockpit.analysis.markers / .timeline:\n"
                          + "\n".join(problems))


def test_the_check_finds_a_retyped_mark() -> None:
    source = (
        "restarts = [m.step for m in markers if m.kind == 'restart']\n"
        "if marker['kind'] != 'adjust': pass\n"
        "mark = Marker(step, 'throttle', text)\n"
        "span = StageSpan(start, end, stage='start-up')\n"
        "if span.stage == 'checkpoint': pass\n"
        # Not a mark's place, or its constant: none is found.
        "if m.kind == markers.RESTART: pass\n"
        "label = 'restart'\n"
        "Marker(step, ADJUST, 'lr_scale=0.5')\n"
    )
    assert [w for _, w in retyped_marks(ast.parse(source), _marks())] == [
        "restart", "adjust", "throttle", "start-up", "checkpoint"]
