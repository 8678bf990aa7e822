"""The framework callbacks are classes built on first use, not at import.

Deriving from a framework's Callback base means importing the framework; doing that only
when `CockpitCallback` is first looked up keeps `import agent.hook.lightning` (and the
agent as a whole) cheap and usable where the framework is not installed.
"""

from __future__ import annotations

from typing import Any, Callable, Dict


def lazy_callback(name: str, namespace: Dict[str, Any], hooks: type,
                  base: Callable[[], type], doc: str) -> Any:
    """Module `__getattr__` body: build `CockpitCallback` from `hooks` + the framework's
    base once, and cache it in the module's namespace."""
    if name != "CockpitCallback":
        raise AttributeError("module %r has no attribute %r" % (namespace["__name__"], name))
    cls = type(name, (hooks, base()), {"__doc__": doc, "__module__": namespace["__name__"]})
    namespace[name] = cls
    return cls
