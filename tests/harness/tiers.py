"""The test tiers, and which test modules a tier need not even import.

Three tiers (see the Makefile):

- `pure`: functions and the store, no process started, no app driven, no training
  framework loaded: the edit-test loop (`make check`);
- `app`: the Textual app driven by Pilot and its snapshots (`make check-app`);
- `all`: everything, the end-to-end tests with sshd and torchrun included (`make test`).

Selecting by marker alone would still import every test module in every worker, and
the modules of the slower tiers load torch, Transformers and Lightning (about 15 s of
CPU per worker on a small machine, more than the pure tier's tests take). So a module is
read, not imported, to see whether any of its tests can be in the tier: its module-level
`pytestmark` and its top-level imports decide that from the source alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

TIERS = ("pure", "app", "all")

# Markers that put a test in the end-to-end tier: set by hand (`e2e`, `slow`) or from the
# fixtures a test uses (`starts`, tests/conftest.py).
PROCESS_MARKERS = frozenset({"e2e", "slow", "starts"})

# Training frameworks: a test that needs one loads seconds of imports, so it is not in
# the pure tier even if it starts nothing.
FRAMEWORKS = frozenset({"torch", "lightning", "pytorch_lightning", "transformers",
                        "accelerate"})


@dataclass(frozen=True)
class ModuleFacts:
    """What a test module's source says about all of its tests."""

    markers: frozenset[str]   # the module-level `pytestmark` names
    frameworks: bool          # it imports a training framework at its top level
    coroutines: bool          # it has a coroutine test (they drive the app, by Pilot)


def _mark_names(node: ast.expr) -> set[str]:
    """`pytest.mark.slow`, `pytest.mark.timeout(60)` or a list of them -> their names."""
    items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    names: set[str] = set()
    for item in items:
        if isinstance(item, ast.Call):
            item = item.func
        if isinstance(item, ast.Attribute):
            names.add(item.attr)
    return names


def _imports_framework(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in FRAMEWORKS for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in FRAMEWORKS
    if isinstance(node, (ast.Assign, ast.Expr)):
        # `torch = pytest.importorskip("torch")`: a framework imported by name
        call = node.value
        return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "importorskip" and bool(call.args)
                and isinstance(call.args[0], ast.Constant)
                and str(call.args[0].value).split(".")[0] in FRAMEWORKS)
    return False


def module_facts(source: str) -> ModuleFacts:
    tree = ast.parse(source)
    markers: set[str] = set()
    frameworks = False
    coroutines = any(isinstance(node, ast.AsyncFunctionDef) and node.name.startswith("test")
                     for node in ast.walk(tree))
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                        for t in node.targets)):
            markers |= _mark_names(node.value)
        frameworks = frameworks or _imports_framework(node)
    return ModuleFacts(frozenset(markers), frameworks, coroutines)


def module_is_outside(tier: str, path: Path, tests_root: Path) -> bool:
    """True when no test of the module at `path` can be in `tier`, so it need not be
    imported. Only ever errs towards importing: a module it cannot read is imported."""
    if tier == "all":
        return False
    in_ui = path.is_relative_to(tests_root / "ui")
    if tier == "pure" and in_ui:
        return True
    try:
        facts = module_facts(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    if facts.markers & PROCESS_MARKERS:
        return True
    if tier == "app":
        return not in_ui and not facts.coroutines
    return facts.frameworks


def item_is_inside(tier: str, markers: set[str], drives_the_app: bool,
                   needs_framework: bool) -> bool:
    """Whether one collected test belongs to `tier`."""
    if tier == "all":
        return True
    if markers & PROCESS_MARKERS:
        return False
    if tier == "pure":
        return not drives_the_app and not needs_framework
    return drives_the_app


def _starts(value: object) -> bool:
    """Whether a name a test uses is a way of starting a process."""
    import subprocess

    if value is subprocess:
        return True
    return getattr(value, "__module__", None) == "subprocess"


def starts_a_process(func: object, depth: int = 3) -> bool:
    """Whether a test function, or a function of the test suite it calls (followed
    `depth` calls deep), uses `subprocess`: such a test starts a process (the cockpit's
    CLI, a packaging step) and belongs with the end-to-end tests, whatever its fixtures.

    Read from the compiled code's global names, so it costs no run and cannot miss a
    helper of the suite; a process started through a library (a DuckDB extension, a
    package's own subprocess) is not seen, and needs a marker."""
    seen: set[int] = set()

    def walk(fn: object, left: int) -> bool:
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in seen:
            return False
        seen.add(id(code))
        names = set(code.co_names)
        for const in code.co_consts:  # nested functions and lambdas
            if hasattr(const, "co_names"):
                names.update(const.co_names)
        module_globals: dict[str, object] = getattr(fn, "__globals__", {})
        for name in names:
            value = module_globals.get(name)
            if _starts(value):
                return True
            if (left > 0 and callable(value)
                    and str(getattr(value, "__module__", "")).startswith("tests")
                    and walk(getattr(value, "__wrapped__", value), left - 1)):
                return True
        return False

    return walk(getattr(func, "__wrapped__", func), depth)
