"""Validation of what a trainer spool holds, against the protocol, where it enters the agent.

A spool is written by the training process: user code, which may be buggy, compromised
or simply another program writing into the run dir. Everything read from it is checked
here before it is journaled, so no type, size or number the cockpit's store cannot hold
(and no record only the agent may write) travels further than the spool reader. A record
that fails is refused whole, with a reason that names the field, never repaired: the
spool reader counts it and keeps it for inspection (agent.journal.spool).

The shapes are the ones `agent.hook.Reporter` writes (docs/protocol.md); unknown fields
are kept, as the protocol says, but held to the same bounds as known ones (finite
numbers, 64-bit integers, bounded strings and nesting).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from agent.wire import events, ops
from agent.wire.events import AGENT_EVENT_KINDS
from agent.wire.protocol import (
    ALERT,
    ALERT_KINDS,
    EVAL,
    EVENT,
    INT64_MAX,
    INT64_MIN,
    LOG,
    MAX_LOG_LINE,
    RUN,
    SEVERITIES,
    SPOOL_HEADER,
    SPOOL_RECORD_TYPES,
    TRAIN,
)

MAX_NAME = 256  # characters of a kind, code, id, stage, key
MAX_TEXT = 64 << 10  # characters of a message, path or any other string
MAX_DEPTH = 32  # nesting of objects and lists in one record
MAX_RANK = (1 << 31) - 1
MAX_PID = (1 << 31) - 1
MAX_TS = 1e10  # s since the epoch (year 2286): a later or negative time is no clock's
# A header's file id names the file in every `src` the journal holds (agent.journal.spool), so it
# must match what the reader finds again there; '.' is left to the ids the reader gives
# headerless files, which a header must not be able to claim.
FILE_ID = re.compile(r"[0-9A-Za-z_-]{1,64}\Z")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
NONFINITE = (None, "nan", "inf", "-inf")
LOG_STREAMS = ("stdout", "stderr")


class Rejected(ValueError):
    """A spool line or header that does not hold to the protocol; the message says why."""


def show(value: Any, limit: int = 60) -> str:
    """A short, escaped rendering of an untrusted value for a reason text."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def visible(text: str) -> str:
    """`text` with its control characters written out (`\\x1b`), for a name that is only
    told, such as a spool folder's that is refused for holding them."""
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), text)


def name_problem(name: str) -> Optional[str]:
    """Why `name` cannot be a job's folder name or identifier, or None."""
    if not name or name in (".", "..") or name.startswith("-"):
        return "it is empty, '.', '..' or starts with '-'"
    if len(name) > 128:
        return "it is longer than 128 characters"
    if any(c in name for c in "/\\") or _CONTROL.search(name):
        return "it holds '/', '\\\\' or a control character"
    return None


# -- values --------------------------------------------------------------------------

def _plain(value: Any, field: str, depth: int = 0) -> None:
    """A JSON value the cockpit can store: finite, 64-bit, bounded in size and depth.
    Exact type tests: json.loads makes only these types, and this runs on every line."""
    kind = type(value)
    if kind is str:
        if len(value) > MAX_TEXT:
            raise Rejected("field %s is a string of %d characters (at most %d)"
                           % (show(field), len(value), MAX_TEXT))
    elif kind is float:
        if value - value != 0.0:  # NaN or an infinity
            raise Rejected("field %s holds %s (JSON has no NaN or infinity)"
                           % (show(field), value))
    elif kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise Rejected("field %s holds %s, outside the 64-bit integer range"
                           % (show(field), show(value)))
    elif value is None or kind is bool:
        pass
    elif kind is dict or kind is list:
        if depth >= MAX_DEPTH:
            raise Rejected("field %s is nested deeper than %d levels" % (show(field),
                                                                          MAX_DEPTH))
        if kind is dict:
            for key, item in value.items():
                if len(key) > MAX_NAME:
                    raise Rejected("field %s has a key of %d characters (at most %d)"
                                   % (show(field), len(key), MAX_NAME))
                _plain(item, field, depth + 1)
        else:
            for item in value:
                _plain(item, field, depth + 1)
    else:  # a caller's own object (not from json.loads) is no record
        raise Rejected("field %s holds a %s" % (show(field), kind.__name__))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _want(ok: bool, field: str, what: str, value: Any) -> None:
    if not ok:
        raise Rejected("field %r must be %s, not %s" % (field, what, show(value)))


# Each check returns at once when the value is right; the reason is formatted only for
# a value that is not (they run on every field of every spool line).

def _int(field: str, minimum: int = INT64_MIN) -> Callable[[Any], None]:
    what = "an integer" if minimum == INT64_MIN else "an integer >= %d" % minimum

    def check(value: Any) -> None:
        if value is None or (type(value) is int and value >= minimum):
            return
        _want(False, field, what, value)
    return check


def _number(field: str, minimum: Optional[float] = None) -> Callable[[Any], None]:
    what = "a number" if minimum is None else "a number >= %g" % minimum
    low = float("-inf") if minimum is None else minimum

    def check(value: Any) -> None:
        if value is None or ((type(value) is float or type(value) is int) and value >= low):
            return
        _want(False, field, what, value)
    return check


def _text(field: str, limit: int = MAX_TEXT) -> Callable[[Any], None]:
    what = "a string of at most %d characters" % limit

    def check(value: Any) -> None:
        if value is None or (type(value) is str and len(value) <= limit):
            return
        _want(False, field, what, value)
    return check


def _choice(field: str, choices: Tuple[Any, ...]) -> Callable[[Any], None]:
    what = "one of %s" % ", ".join(repr(c) for c in choices)

    def check(value: Any) -> None:
        if (value is None or type(value) is str) and value in choices:
            return
        _want(False, field, what, value)
    return check


def _bool(field: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        _want(type(value) is bool, field, "true or false", value)
    return check


def _object(field: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        _want(value is None or type(value) is dict, field, "an object", value)
    return check


def _scalars(field: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        _want(value is None or (type(value) is dict and all(
            v is None or type(v) is float or type(v) is int for v in value.values())),
            field, "an object of name: number", value)
    return check


def _names(field: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        _want(value is None or (type(value) is list and all(
            type(v) is str and len(v) <= MAX_NAME for v in value)), field,
            "a list of names", value)
    return check


# -- record shapes (what agent.hook.Reporter writes) ---------------------------------

_TIMES = ("step_time", "data_time", "compute_time", "comm_time", "ckpt_time")
_FIELDS: Dict[str, Dict[str, Callable[[Any], None]]] = {
    TRAIN: {
        "epoch": _number("epoch"), "stage": _text("stage", MAX_NAME),
        "loss": _number("loss"), "nonfinite": _choice("nonfinite", NONFINITE),
        "lr": _number("lr"), "samples": _int("samples"), "tokens": _int("tokens"),
        **{name: _number(name) for name in _TIMES},
        "loss_scale": _number("loss_scale"), "grad_norm": _number("grad_norm"),
        "extra": _scalars("extra"),
    },
    EVAL: {"loss": _number("loss"), "metrics": _scalars("metrics")},
    EVENT: {"step": _int("step"), "msg": _text("msg"), "data": _object("data")},
    RUN: {
        **{name: _int(name) for name in ("total_steps", "total_epochs", "total_samples",
                                         "total_tokens", "seed", "world_size")},
        "stages": _names("stages"), "tags": _names("tags"), "config": _object("config"),
        "data_version": _text("data_version"), "git_commit": _text("git_commit"),
        "flops_per_step": _number("flops_per_step"), "peak_flops": _number("peak_flops"),
    },
    LOG: {"stream": _choice("stream", LOG_STREAMS), "line": _text("line", MAX_LOG_LINE)},
    ALERT: {
        "kind": _choice("kind", ALERT_KINDS), "severity": _choice("severity", SEVERITIES),
        "code": _text("code", MAX_NAME), "what": _text("what"), "hint": _text("hint"),
        "where": _object("where"),
    },
}
_REQUIRED = {LOG: ("line",), ALERT: ("kind", "severity", "code", "what")}

# The hook's own event kinds, by the shape of their `data`.
_EVENT_DATA: Dict[str, Dict[str, Callable[[Any], None]]] = {
    events.CHECKPOINT_SAVED: {"path": _text("path"), "seconds": _number("seconds", 0.0),
                              "bytes": _int("bytes", 0), "step": _int("step")},
    events.CONTROL_ACK: {"op": _choice("op", (ops.ADJUST,)), "id": _text("id"),
                         "ok": _bool("ok"), "applied_step": _int("applied_step"),
                         "knobs": _object("knobs"), "error": _text("error")},
    events.DROPPED: {"count": _int("count", 0), "reason": _text("reason")},
    events.STAGE: {"stage": _text("stage", MAX_NAME)},
}
_EVENT_REQUIRED = {events.CONTROL_ACK: ("op", "ok"), events.DROPPED: ("count",)}
# The journal's retention report is `dropped` with the seq range it lost; a rank's is a
# count of records it could not write. Only the agent may say it lost journal seqs.
_EVENT_FORBIDDEN: Dict[str, Tuple[str, ...]] = {events.DROPPED: ("first", "last")}


def _fields(record: Mapping[str, Any], checks: Mapping[str, Callable[[Any], None]],
            required: Tuple[str, ...]) -> None:
    for name in required:
        if record.get(name) is None:
            raise Rejected("field %r is missing" % name)
    for name, check in checks.items():
        if name in record:
            check(record[name])


def _event(record: Dict[str, Any]) -> None:
    kind = record.get("kind")
    _want(isinstance(kind, str) and 0 < len(kind) <= MAX_NAME and not _CONTROL.search(kind),
          "kind", "a name (at most %d characters, no control characters)" % MAX_NAME, kind)
    assert isinstance(kind, str)  # _want has rejected anything else
    if kind in AGENT_EVENT_KINDS:
        raise Rejected("event kind %r is the agent's own: a spool may not write it" % kind)
    data = record.get("data")
    checks = _EVENT_DATA.get(kind)
    if checks is None:
        return
    if not isinstance(data, dict):
        raise Rejected("field 'data' of a %s event must be an object, not %s"
                       % (kind, show(data)))
    for name in _EVENT_FORBIDDEN.get(kind, ()):
        if name in data:
            raise Rejected("a %s event from a spool may not carry data.%s (the journal's "
                           "own retention report does)" % (kind, name))
    try:
        _fields(data, checks, _EVENT_REQUIRED.get(kind, ()))
    except Rejected as exc:
        raise Rejected("%s event data: %s" % (kind, exc)) from None


# -- entry points --------------------------------------------------------------------

def check_spool_header(header: Mapping[str, Any], job: str, rank: int) -> Dict[str, Any]:
    """The facts of a spool file's header line (`file_id`, `pid`, `ts`), for the file
    `RUN_DIR/spool/JOB/rank-RANK.*`; `Rejected` when any of them is not what the Reporter
    writes there."""
    if header.get("t") != SPOOL_HEADER:
        raise Rejected("header 't' is %s, not %r" % (show(header.get("t")), SPOOL_HEADER))
    file_id = header.get("file_id")
    if not isinstance(file_id, str) or not FILE_ID.match(file_id):
        raise Rejected("header 'file_id' is %s: it must be 1 to 64 letters, digits, '_' "
                       "or '-'" % show(file_id))
    if header.get("job", job) != job:
        raise Rejected("header 'job' is %s, but the file is in job %r's folder"
                       % (show(header.get("job")), job))
    if header.get("rank", rank) != rank or isinstance(header.get("rank"), bool):
        raise Rejected("header 'rank' is %s, but the file is named for rank %d"
                       % (show(header.get("rank")), rank))
    pid = header.get("pid")
    if pid is not None and not (_is_int(pid) and 0 < pid <= MAX_PID):
        raise Rejected("header 'pid' is %s, not a process id" % show(pid))
    ts = header.get("ts")
    if ts is not None and not (_is_number(ts) and math.isfinite(ts) and 0 <= ts <= MAX_TS):
        raise Rejected("header 'ts' is %s, not a time in seconds since the epoch" % show(ts))
    for name in ("v", "part"):
        value = header.get(name)
        if value is not None and not (_is_int(value) and 0 <= value <= INT64_MAX):
            raise Rejected("header %r is %s, not a count" % (name, show(value)))
    return {"file_id": file_id, "pid": pid, "ts": ts}


def check_spool_record(value: Any, job: str, rank: int) -> Tuple[str, Dict[str, Any]]:
    """(type, fields) of one parsed spool line of job `job`, rank `rank`, ready to
    journal: `job` and `rank` filled in, `t`, `seq` and `src` taken out (the journal and
    the reader set them). `Rejected` says why the line is not a spool record."""
    if not isinstance(value, dict):
        raise Rejected("not a JSON object")
    record = dict(value)
    t = record.pop("t", None)
    if not isinstance(t, str) or not t:
        raise Rejected("no record type ('t')")
    if t not in SPOOL_RECORD_TYPES:
        raise Rejected("record type %s is not allowed in a spool (a trainer writes %s)"
                       % (show(t), ", ".join(SPOOL_RECORD_TYPES)))
    record.pop("seq", None)
    record.pop("src", None)
    for name, item in record.items():
        if len(name) > MAX_NAME:
            raise Rejected("a field name has %d characters (at most %d)" % (len(name),
                                                                             MAX_NAME))
        kind = type(item)  # the common scalars inline, the rest through _plain
        if item is None or (kind is float and item - item == 0.0) or (
                kind is str and len(item) <= MAX_TEXT):
            continue
        _plain(item, name)
    if record.get("job") is None:
        record["job"] = job
    elif record["job"] != job:
        raise Rejected("field 'job' is %s, not this spool's job %r" % (show(record["job"]),
                                                                       job))
    if record.get("rank") is None:
        record["rank"] = rank
    elif record["rank"] != rank or isinstance(record["rank"], bool):
        raise Rejected("field 'rank' is %s, not this spool's rank %d" % (
            show(record["rank"]), rank))
    ts = record.get("ts")
    if ts is not None and not (_is_number(ts) and 0 <= ts <= MAX_TS):
        raise Rejected("field 'ts' is %s, not a time in seconds since the epoch" % show(ts))
    if t in (TRAIN, EVAL):
        _want(_is_int(record.get("step")), "step", "an integer", record.get("step"))
    _fields(record, _FIELDS[t], _REQUIRED.get(t, ()))
    if t == EVENT:
        _event(record)
    return t, record
