"""Architecture guard rails: the host agent and the cockpit core stay free of UI/heavy deps.

Checked in fresh subprocesses so that whatever the test session already imported cannot
hide a violation.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

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
    bad = _offenders(loaded, ("cockpit", "textual", "duckdb", "torch", "textual_plotext"))
    assert not bad, f"agent pulled in {bad}"


def test_cockpit_core_imports_no_textual() -> None:
    modules = _package_modules("cockpit", exclude_prefix="cockpit.ui")
    modules = [m for m in modules if m != "cockpit.cli"]
    loaded = _modules_after_import(modules)
    bad = _offenders(loaded, ("textual", "textual_plotext", "torch"))
    assert not bad, f"cockpit core pulled in {bad}"


@pytest.mark.parametrize("package", ["agent", "cockpit"])
def test_no_source_file_imports_across_the_boundary(package: str) -> None:
    """A static check too: lazy imports inside functions are violations as well."""
    forbidden = {
        "agent": ("cockpit", "textual", "duckdb"),
        "cockpit": ("textual", "textual_plotext"),
    }[package]
    problems = []
    for path in (ROOT / package).rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if package == "cockpit" and (rel.startswith("cockpit/ui/") or rel == "cockpit/cli.py"):
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            for name in forbidden:
                if stripped.startswith((f"import {name}", f"from {name}")) and (
                    stripped[len("import " if stripped.startswith("import") else "from "):]
                    .split()[0]
                    .split(".")[0]
                    == name
                ):
                    problems.append(f"{rel}:{lineno}: {stripped}")
    assert not problems, "\n".join(problems)
