"""What a vocabulary guard asks of an expression: does it name a field of that kind?

`tests/test_vocabulary.py` (states) and `tests/test_event_vocabulary.py` (event kinds)
both look for a literal compared with something named `…state` or `…kind`; the test of
"named so" is this one, so the two guards see the same shapes.
"""

from __future__ import annotations

import ast


def names_a(node: ast.expr, suffix: str) -> bool:
    """`x`, `obj.x`, `row["x"]`, `row.get("x")` for any name x ending in `suffix`."""
    if isinstance(node, ast.Name):
        return node.id.endswith(suffix)
    if isinstance(node, ast.Attribute):
        return node.attr.endswith(suffix)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value).endswith(suffix)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get" and node.args
            and isinstance(node.args[0], ast.Constant)):
        return str(node.args[0].value).endswith(suffix)
    return False
