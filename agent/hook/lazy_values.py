"""Turning whatever the trainer handed to the Reporter into JSON numbers, off the hot path.

`Reporter.step()` keeps the raw objects (often 0-dim tensors still being computed on a
GPU) and the flusher thread calls this module later, so that the training loop never
pays for `.item()` or a device synchronisation. Anything with an `.item()` method is
treated as a tensor-like scalar: torch is never imported here.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple


class NotAScalar(ValueError):
    """A reported value that cannot become one number (a string, a multi-element tensor)."""


def to_number(value: Any) -> Optional[float]:
    """The value as a Python float/int, `None` for `None`; raises `NotAScalar` otherwise.

    Non-finite floats are returned as they are; the caller decides how to encode them.
    """
    if value is None:
        return None
    kind = type(value)
    if kind is float or kind is int:
        return value
    if kind is bool:
        return int(value)
    item = getattr(value, "item", None)
    if item is not None:
        detach = getattr(value, "detach", None)
        if detach is not None:
            # Reading through detach() keeps autograd out of it; item() then copies one
            # number (waiting for the producing kernel in *this* thread, not the trainer's).
            value = detach()
            item = value.item
        try:
            value = item()
        except (RuntimeError, ValueError) as exc:
            shape = getattr(value, "shape", None)
            raise NotAScalar(
                "has %s elements, not one (shape %s)"
                % (getattr(value, "numel", lambda: "several")(), tuple(shape or ()))
            ) from exc
        if type(value) is bool:
            return int(value)
        return value
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise NotAScalar("is a %s, not a number" % kind.__name__) from exc


def finite_or_none(value: Optional[float]) -> Optional[float]:
    """JSON has no NaN/Inf: non-finite floats become null (protocol: null = n/a)."""
    if type(value) is float and not math.isfinite(value):
        return None
    return value


def split_nonfinite(value: Optional[float]) -> Tuple[Optional[float], Optional[str]]:
    """(value or None, "nan"/"inf"/"-inf" or None): how a loss is written to the spool."""
    if type(value) is not float or math.isfinite(value):
        return value, None
    if math.isnan(value):
        return None, "nan"
    return None, "inf" if value > 0 else "-inf"


def as_int(value: Optional[float]) -> Optional[int]:
    """Counters (step, samples, tokens) are integers on the wire."""
    if value is None or type(value) is int:
        return value
    if not math.isfinite(value):
        return None
    return int(value)
