"""Sizes a reader can hold: a module of cockpit/ or agent/ over `MODULE_LINES` lines
says why at its top (its docstring), and a function over `FUNCTION_LINES` says why
inside (its docstring or a comment), where splitting it would hide its logic rather
than clarify it. A new long module or function fails here until it is split along a
real seam or its reason is written down."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cockpit", "agent")
MODULE_LINES = 500
FUNCTION_LINES = 80
# How a reason reads: "Over 500 lines because …", "one long module because …", "longer
# than most modules: …", "… so they stay in one module"; for a function, "Over 80 lines:
# …" or "one long function …".
MODULE_REASON = re.compile(
    r"(?i)\b500\s+lines\b|\blong module\b|\blonger than most\b|\bstays? in one module\b")
FUNCTION_REASON = re.compile(r"(?i)\b80\s+lines\b|\blong function\b")


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _function_reason(lines: list[str], node: ast.AST) -> bool:
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = node.body
    doc = ast.get_docstring(node) or ""
    # The docstring, or a comment between the signature and the first statement after it.
    first = body[1] if (doc and len(body) > 1) else body[0]
    head = "\n".join(lines[node.lineno - 1:first.lineno])
    return bool(FUNCTION_REASON.search(doc) or FUNCTION_REASON.search(head))


def long_without_reason() -> list[str]:
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text, str(path))
        rel = path.relative_to(ROOT).as_posix()
        if len(lines) > MODULE_LINES and not MODULE_REASON.search(
                ast.get_docstring(tree) or ""):
            found.append(f"{rel}: {len(lines)} lines, no reason in its docstring")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES and not _function_reason(lines, node):
                    found.append(f"{rel}:{node.lineno}: {node.name} is {length} lines, "
                                 "no reason inside")
    return found


@pytest.mark.slow
def test_long_modules_and_functions_say_why() -> None:
    found = long_without_reason()
    assert not found, "\n".join(found)


def test_the_check_sees_a_long_function_without_a_reason(tmp_path: Path) -> None:
    """The rule can fail: a long function with no reason is found, one with a reason is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES + 1))
    silent = ast.parse(f"def f():\n{body}").body[0]
    explained = ast.parse(f"def f():\n    # Over 80 lines: one table.\n{body}").body[0]
    assert not _function_reason(f"def f():\n{body}".splitlines(), silent)
    assert _function_reason(f"def f():\n    # Over 80 lines: one table.\n{body}".splitlines(),
                            explained)
