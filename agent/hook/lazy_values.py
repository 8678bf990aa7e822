"""Turning whatever the trainer handed to the Reporter into JSON numbers, off the hot path.

`Reporter.step()` keeps the raw objects (often 0-dim tensors still being computed on a
GPU) and the flusher thread calls this module later, so that the training loop never
pays for `.item()` or a device synchronisation. Anything with an `.item()` method is
treated as a tensor-like scalar: torch is never imported here.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional, Tuple, overload

from agent.wire.protocol import INT64_MAX, INT64_MIN  # the range the cockpit can keep


class NotAScalar(ValueError):
    """A reported value that cannot become one number the cockpit can store.

    `problem` names the kind of problem (type, shape, nonfinite, range), so that a
    warning is given once per field and kind, not once per field.
    """

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


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
    if isinstance(value, (str, bytes, bytearray)):
        # float("2.5") would parse it, but a string here is a bug in the caller's loop
        # (a formatted value passed by mistake), and the docs promise null and a warning.
        raise NotAScalar("is a %s, not a number" % kind.__name__, "type")
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
                % (getattr(value, "numel", lambda: "several")(), tuple(shape or ())),
                "shape",
            ) from exc
        if type(value) is bool:
            return int(value)
        return value
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise NotAScalar("is a %s, not a number" % kind.__name__, "type") from exc


@overload
def wire_number(value: Any, integer: Literal[True], nonfinite: bool = False
                ) -> Optional[int]: ...
@overload
def wire_number(value: Any, integer: bool = False, nonfinite: bool = False
                ) -> Optional[float]: ...
def wire_number(value: Any, integer: bool = False, nonfinite: bool = False
                ) -> Optional[float]:
    """`to_number`, narrowed to what the cockpit can load; raises `NotAScalar` otherwise.

    NaN/Inf are refused (JSON has no literal for them) unless `nonfinite` (the loss,
    which has its own `nonfinite` field); `integer` truncates floats for counters.
    """
    number = to_number(value)
    if type(number) is float:
        if not math.isfinite(number):
            if nonfinite:
                return number
            raise NotAScalar("is %s, not a finite number" % number, "nonfinite")
        if integer:
            number = int(number)
    if type(number) is int and not INT64_MIN <= number <= INT64_MAX:
        raise NotAScalar("is a %d-bit integer, outside the 64-bit range the cockpit stores"
                         % number.bit_length(), "range")
    return number


def split_nonfinite(value: Optional[float]) -> Tuple[Optional[float], Optional[str]]:
    """(value or None, "nan"/"inf"/"-inf" or None): how a loss is written to the spool."""
    if type(value) is not float or math.isfinite(value):
        return value, None
    if math.isnan(value):
        return None, "nan"
    return None, "inf" if value > 0 else "-inf"
