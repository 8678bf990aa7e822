"""Architecture guard rails: the host agent and the cockpit core stay free of UI/heavy deps,
one package owns each outside library, widgets do no I/O, and colours come from the theme.

Checked in fresh subprocesses so that whatever the test session already imported cannot
hide a violation.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules_after_import(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout))


def _package_modules(package: str, *, exclude_prefix: str | None = None) -> list[str]:
    pkg_path = ROOT / package.replace(".", "/")
    names = [package]
    for info in pkgutil.walk_packages([str(pkg_path)], prefix=f"{package}."):
        if exclude_prefix and info.name.startswith(exclude_prefix):
            continue
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def _offenders(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in forbidden)


def test_agent_imports_no_cockpit_ui_store_or_torch() -> None:
    modules = _package_modules("agent")
    loaded = _modules_after_import(modules)
    bad = _offenders(loaded, ("cockpit", "textual", "duckdb", "torch"))
    assert not bad, f"agent pulled in {bad}"


def test_cockpit_core_imports_no_textual() -> None:
    modules = _package_modules("cockpit", exclude_prefix="cockpit.ui")
    modules = [m for m in modules if m != "cockpit.app.cli"]
    loaded = _modules_after_import(modules)
    bad = _offenders(loaded, ("textual", "torch"))
    assert not bad, f"cockpit core pulled in {bad}"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in a file, those inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, full dotted name) of every import in a file: `from a.b import c` gives
    `a.b.c`, so a rule can name a subpackage."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _sources(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("package", ["agent", "cockpit"])
def test_no_source_file_imports_across_the_boundary(package: str) -> None:
    """A static check too: lazy imports inside functions are violations as well."""
    forbidden = {
        "agent": ("cockpit", "textual", "duckdb"),
        "cockpit": ("textual",),
    }[package]
    problems = []
    for path in _sources(package):
        rel = path.relative_to(ROOT).as_posix()
        if package == "cockpit" and (rel.startswith("cockpit/ui/") or rel == "cockpit/app/cli.py"):
            continue
        problems += [f"{rel}:{line}: imports {name}" for line, name in _imports(path)
                     if name in forbidden]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize(("library", "owner"), [
    ("duckdb", "cockpit/store/"),
    ("paramiko", "cockpit/transport/"),
])
def test_one_package_owns_each_outside_library(library: str, owner: str) -> None:
    """Only the store touches DuckDB and only the transport speaks SSH: a second user
    of either would need its own locking, error wording and tests."""
    problems = []
    for path in _sources("cockpit"):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(owner):
            problems += [f"{rel}:{line}: imports {library}" for line, name in _imports(path)
                         if name == library]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_only_the_store_runs_sql() -> None:
    """The store's cursor is public for its own modules and tests: code outside the store
    that borrowed it (a setting, a query) would touch DuckDB without importing it."""
    problems = []
    for path in _sources("cockpit"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cockpit/store/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("cursor", "execute", "sql")):
                problems.append(f"{rel}:{node.lineno}: calls .{node.func.attr}()")
    assert not problems, "\n".join(problems)


# What a widget or screen must not reach for: it draws what it is given and asks for
# more with a message, so that a slow disk or host never freezes the screen.
_IO_MODULES = ("duckdb", "paramiko", "subprocess", "socket", "urllib", "http", "shutil",
               "sqlite3")
_IO_PACKAGES = ("cockpit.store", "cockpit.transport", "cockpit.ingest", "cockpit.control",
                "cockpit.sessions.live", "cockpit.sessions.replay")
_IO_CALLS = ("open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir",
             "unlink")


def test_widgets_and_screens_do_no_io() -> None:
    problems = []
    for path in _sources("cockpit/ui/widgets", "cockpit/ui/screens"):
        rel = path.relative_to(ROOT).as_posix()
        for line, name in _imported_names(path):
            if name.split(".")[0] in _IO_MODULES or name.startswith(_IO_PACKAGES):
                problems.append(f"{rel}:{line}: imports {name}")
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) else None)
                if called in _IO_CALLS:
                    problems.append(f"{rel}:{node.lineno}: calls {called}()")
    assert not problems, "\n".join(problems)


def _literal_colours(css: str) -> list[str]:
    """Colour values written out in CSS (`#f00`, `rgb(…)`, `red`) rather than taken
    from the theme (`$error`): they would look the same in every theme."""
    from textual._color_constants import COLOR_NAME_TO_RGB

    names = set(COLOR_NAME_TO_RGB) - {"transparent"}
    found = []
    for block in re.findall(r"\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S)):
        for declaration in block.split(";"):
            _, colon, value = declaration.partition(":")
            if not colon:
                continue
            value = value.strip()
            if re.search(r"#[0-9a-fA-F]{3,8}\b|\b(rgb|rgba|hsl|hsla)\(", value) or (
                    names & set(re.split(r"[\s,]+", value.lower()))):
                found.append(declaration.strip())
    return found


def test_theme_css_uses_theme_variables_for_every_colour() -> None:
    problems = [f"themes/{path.name}: {declaration}"
                for path in sorted((ROOT / "themes").glob("*.tcss"))
                for declaration in _literal_colours(path.read_text())]
    assert not problems, "\n".join(problems)


def test_python_carries_no_inline_css_and_no_literal_colours_in_default_css() -> None:
    """Widgets may carry DEFAULT_CSS for their own layout, with theme colours only; any
    other CSS belongs in themes/*.tcss, where a theme can override it."""
    problems = []
    for path in _sources("cockpit/ui"):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == "CSS":
                        problems.append(f"{rel}:{node.lineno}: CSS in Python")
                    elif (isinstance(target, ast.Name) and target.id == "DEFAULT_CSS"
                          and isinstance(node.value, ast.Constant)):
                        problems += [f"{rel}:{node.lineno}: {declaration}"
                                     for declaration in _literal_colours(node.value.value)]
                    elif (isinstance(target, ast.Attribute) and isinstance(target.value,
                          ast.Attribute) and target.value.attr == "styles"):
                        problems.append(f"{rel}:{node.lineno}: sets .styles.{target.attr}")
    assert not problems, "\n".join(problems)


def test_the_agent_parses_as_the_python_of_an_older_gpu_host() -> None:
    """The agent runs on each GPU host's own Python, 3.8 and later: a parenthesised
    context manager, a `match` or an `except*` would pass every other test here (3.10+)
    and fail there at start-up."""
    too_new = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        try:
            ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 8))
        except SyntaxError as exc:
            too_new.append(f"{path.relative_to(ROOT)}:{exc.lineno}: {exc.msg}")
    assert not too_new, too_new


def _import_circles(graph: Any) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph.modules:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))
    return circles


def test_no_import_circle_anywhere() -> None:
    """The layers contract orders packages; this finds a circle inside one too (a module
    importing another that imports it back, at any depth, lazily or not, or only for the
    type checker: a circle there still says two modules lean on each other)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("cockpit", "agent", exclude_type_checking_imports=False,
                              cache_dir=None)
    assert _import_circles(graph) == []
