"""Wire protocol constants and record encoding (see docs/protocol.md).

Records are encoded with `t` first and `seq` second so that the cockpit can route a line
by its prefix without parsing it.
"""

import json
import math
import time

PROTOCOL_VERSION = 1

# The record types, each spelt once: a reader compares `t` with these, a writer passes them
# to `encode`.
HELLO = "hello"
GPU = "gpu"
HOST = "host"
RUN = "run"
TRAIN = "train"
EVAL = "eval"
EVENT = "event"
LOG = "log"
ALERT = "alert"
RECORD_TYPES = (HELLO, GPU, HOST, RUN, TRAIN, EVAL, EVENT, LOG, ALERT)
# The header line a stream (`cockpit-agent stream`) starts each connection with.
STREAM_HEADER = "stream"
MAX_LINE_BYTES = 1 << 20
MAX_LOG_LINE = 4096  # characters of one `log` record's line

# The cockpit stores counters as DuckDB BIGINT and parses lines with orjson, which reads a
# longer integer as a double (2**70 then fails the BIGINT cast, 10**400 is infinity and
# fails the whole line): such an integer is no number the cockpit can keep.
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# An `alert` record's `kind` and `severity`.
ALERT_KINDS = ("resource", "data", "parameter")
SEVERITIES = ("info", "warning", "critical")

# The trainer spool (docs/protocol.md, "Trainer spool"): its header type, and the record
# types a rank's `agent.hook.Reporter` writes there. A spool is untrusted input, so the
# agent refuses every other type in it: `hello`, `gpu` and `host` are the agent's own
# words, and a spool that could write them could speak for the agent.
SPOOL_HEADER = "spool"
SPOOL_VERSION = 1  # the spool header's `v`
SPOOL_RECORD_TYPES = (TRAIN, EVAL, EVENT, RUN, LOG, ALERT)

# The kinds of `event` records, and which of them only the agent may journal
# (`AGENT_EVENT_KINDS`), are spelt in `agent.wire.events`.

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
