"""Wire protocol constants and record encoding (see docs/protocol.md).

Records are encoded with `t` first and `seq` second so that the cockpit can route a line
by its prefix without parsing it.
"""

import json
import math
import time

PROTOCOL_VERSION = 1

RECORD_TYPES = ("hello", "gpu", "host", "run", "train", "eval", "event", "log", "alert")
STREAM_HEADER = "stream"
MAX_LINE_BYTES = 1 << 20

_dumps = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str
).encode


def _finite(value):
    """Replace NaN/Inf (not valid JSON) by null, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def encode(t, seq, fields, ts=None):
    """One wire line (bytes, newline-terminated) for a record of type `t`."""
    record = {"t": t, "seq": seq, "ts": time.time() if ts is None else ts}
    for key, value in fields.items():
        if key not in ("t", "seq"):
            record[key] = value
    if "ts" in fields and fields["ts"] is not None:
        record["ts"] = fields["ts"]
    try:
        text = _dumps(record)
    except ValueError:
        text = _dumps(_finite(record))
    return (text + "\n").encode("utf-8")
