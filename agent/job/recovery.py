"""Why a job stopped, whether trying again can help, and when a silent job is hung.

Three pure pieces the job runner (`agent.job.managed`) combines:

- `classify` reads what a failure left behind -- torchrun's error file
  (TORCHELASTIC_ERROR_FILE), the tail of the job's output, and GPU telemetry seen during
  the attempt -- and names a cause with the evidence that led to it. Restarting blindly
  is what plain `torchrun --max-restarts` does; naming the cause is what lets the policy
  stop retrying a failure that will only repeat.
- `RecoveryPolicy` decides retry-or-stop within a global restart budget, with backoff,
  and stops early on causes that do not heal by themselves (the same out-of-memory or the
  same data error twice), saying what to try instead.
- `HangDetector` turns step progress into "no step for k × the median step time" (never
  less than a floor), so a hang is caught long before an NCCL timeout would fire; a job
  at its end (its declared final step reported, or a rank exited cleanly) is never hung.

Its length is mostly `classify`: the failure signatures, their hints and the readers of
torchrun's output. The three pieces share the cause names, so they stay in one module.
"""

from __future__ import annotations

import json
import math
import re
import signal
import time
from collections import deque
from pathlib import Path
from typing import Any, Deque, Dict, Iterable, List, Optional, Sequence, Tuple

from agent.job.bounded_read import read_capped
from agent.job.gpu_history import APP_XIDS
from agent.wire.causes import DATA, GPU_FAULT, HANG, KILLED, NCCL, OOM, UNKNOWN, USER_CODE

# Causes (agent.wire.causes) are checked in this order: a GPU fault often surfaces as a
# CUDA error in user code, and an OOM as an NCCL failure on the peers, so the specific
# ones go first.

_PATTERNS = (
    (OOM, re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|"
                     r"std::bad_alloc|Cannot allocate memory|out of memory", re.I)),
    (GPU_FAULT, re.compile(r"\bXid\b|uncorrectable ECC|ECC error|GPU is lost|"
                           r"fallen off the bus|unspecified launch failure|"
                           r"CUDA error: (?:an illegal instruction|uncorrectable|"
                           r"unknown error|misaligned)", re.I)),
    (NCCL, re.compile(r"NCCL (?:error|WARN)|ncclSystemError|ncclRemoteError|"
                      r"ncclInternalError|ProcessGroupNCCL|Watchdog caught collective|"
                      r"Connection (?:reset|closed|refused) by peer|"
                      r"Rendezvous(?:Timeout|Connection|Closed)Error|Socket Timeout|"
                      r"gloo.*(?:Connection|Timed out|timeout)|"
                      r"DistNetworkError|DistBackendError", re.I)),
    (DATA, re.compile(r"\bDataError\b|UnicodeDecodeError|corrupt|CRC (?:check|mismatch)|"
                      r"truncated (?:file|record|shard)|invalid (?:record|sample|shard)", re.I)),
)
# PyTorch's word for a DataLoader worker process a signal ended: the rank then raises a
# RuntimeError that reads like the code's own exception, but the code did not fail.
_LOADER_KILLED = re.compile(r"DataLoader worker \(pid(?:\(s\))? ?([\d, ]+)\) is killed by "
                            r"signal: ([\w ]+?)\.?\s*(?:$|It is possible)", re.I)
_TRACEBACK = re.compile(r"^(?:\[\w*\d+\]:)?\s*Traceback \(most recent call last\)")
_EXCEPTION_LINE = re.compile(
    r"^(?:\[\w*\d+\]:)?\s*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|"
    r"Failure))(?::\s*(.*))?$")
_FILE = re.compile(r"(?:^|[\s'\"(=:,])(/[\w.\-]+(?:/[\w.\-]+)*|[\w.\-]+/[\w.\-/]*\w|"
                   r"[\w\-]+\.(?:bin|npy|npz|pt|arrow|parquet|jsonl?|tar|idx|txt|csv|"
                   r"tfrecord|mds|shard|py))(?=$|[\s'\"),:;])")
_RANGE = re.compile(r"(?:samples?|records?|lines?|windows?|rows?|index(?:es)?|offsets?)"
                    r"[ =:]+(\d+)\s*(?:-|\.\.|to|:)\s*(\d+)", re.I)
_INDEX = re.compile(r"(?:sample|record|index|offset|line|row)[ =:#]+(\d+)", re.I)
_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_SIGNAL_EXIT = re.compile(r"exitcode\s*:\s*(-\d+)|Signal (\d+) \(SIG\w+\) received", re.I)
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)", re.I)
# What the interpreter itself says when the spec's code never got to run. These lines
# come from the worker (or from torchrun's own python), written straight into torchrun's
# stderr: no traceback, no `[rankN]:` prefix unless torchrun tees them.
_LINE_START = r"^(?:\[\w*\d+\]:)?\s*"
_PROGRAM = r"(?!\S*(?:Error|Exception|Warning):)(\S+)"  # argv[0], not an exception's name
# The interpreter names itself (argv[0]: the worker's is torchrun's sys.executable), which
# tells its own report from a trainer's log line that merely says "No module named".
_PYTHON = r"(\S*python[\w.\-]*)"
_NO_SCRIPT = re.compile(_LINE_START + _PYTHON + r": (?:can't open file '(.+)': \[Errno \d+\] (.+)|"
                        r"can't find '__main__' module in '(.+)')$")
_NO_MODULE = re.compile(_LINE_START + _PYTHON + r": (?:No module named (\S+)|Error while finding "
                        r"module specification for '([^']+)' \((.+)\))$")
_SOURCE_AT = re.compile(_LINE_START + r'File "(.+)", line (\d+)')
_COMPILE_ERROR = re.compile(_LINE_START + r"((?:SyntaxError|IndentationError|TabError)\b.*)$")
_USAGE = re.compile(_LINE_START + r"usage: ", re.I)
_USAGE_ERROR = re.compile(_LINE_START + _PROGRAM + r": error: (.+)$")
_IMPORT_ERROR = re.compile(r"\b(?:ModuleNotFoundError|ImportError)\b")
# A shell's (or exec's) "command not found" and "not executable".
_EXEC_CODES = {127: "not found", 126: "not executable"}
_EXEC_SAYS = re.compile(r"not found|No such file or directory|Permission denied|"
                        r"cannot execute")

HINTS = {
    OOM: "the job runs out of memory at this size: lower the micro-batch (or sequence "
         "length), enable activation checkpointing, or shard the optimizer state",
    GPU_FAULT: "a GPU fault (XID/ECC) needs the host checked: exclude it and relaunch on "
               "the others, or drain the GPU and reset it",
    NCCL: "a collective or the network between hosts failed: check the links and NCCL "
          "settings; restarting usually heals a transient fault",
    DATA: "a training input is bad: repair or exclude the file and sample range named in "
          "the evidence, then resume",
    USER_CODE: "the training script raised an exception: fix the code (the traceback is "
               "in the evidence), then resume from the newest checkpoint",
    HANG: "no step progress: the stacks dumped before the kill show where the ranks "
          "waited",
    KILLED: "a rank was killed by a signal (the host's OOM killer, an operator, or a "
            "scheduler): check the host's memory and logs",
    UNKNOWN: "the job failed without a recognisable cause: read its output",
}


class Diagnosis:
    """A named cause and the lines that show it."""

    def __init__(self, cause: str, evidence: List[str], where: Optional[Dict[str, Any]] = None,
                 signature: Optional[str] = None, hint: Optional[str] = None) -> None:
        self.cause = cause
        self.evidence = evidence
        self.where = where or {}
        # What must match for two failures to count as "the same one again".
        self.signature = signature if signature is not None else cause
        # A cause's general advice, unless the failure named what to fix (a missing file).
        self._hint = hint

    @property
    def hint(self) -> str:
        return self._hint or HINTS.get(self.cause, HINTS[UNKNOWN])

    def as_dict(self) -> dict:
        return {"cause": self.cause, "evidence": self.evidence, "where": self.where,
                "hint": self.hint}


# torchrun's error file is a small JSON document (a message, a traceback, a timestamp):
# a larger one is not read, its size says nothing a diagnosis could use.
ERROR_FILE_MAX_BYTES = 1 << 20
# How far the failure's timestamp may lie before the file was written (its ctime: set by
# the kernel, which the trainer cannot move to the past): torchrun writes the file after
# tearing its workers down (its monitor interval, then SIGTERM and at most 30 s for them
# to end), stamped with the failing worker's time. 10 minutes is generous for that and
# is what a timestamp can move a failure back by: too little to take it out of a restart
# budget's window in any useful way (the default window is an hour).
ERROR_FILE_MAX_LAG = 600.0
# How far it may lie after the file's ctime or now: the stamp is `int(time.time())`
# (rounded down), so none is due; this is room for a shared run dir's file server,
# whose clock sets the ctime.
ERROR_FILE_SLACK = 60.0


def read_error_file(path: Path, problems: Optional[List[str]] = None) -> Optional[dict]:
    """torchrun's error file as {message, rank?, timestamp?}, None if absent or unreadable.

    Its `message` is either a string or `{"message": str, "extraInfo": {...}}` depending on
    who wrote it (the `@record` decorator or torchrun itself).

    The file is the trainer's: one over ERROR_FILE_MAX_BYTES (or not a regular file, or
    not JSON) is unreadable, and why is appended to `problems` when given. Its timestamp
    is kept only when it is a finite number within ERROR_FILE_MAX_LAG before the file was
    written and at most ERROR_FILE_SLACK after that and after now; otherwise it is None,
    as for a file without one (the caller then keeps the failure time it saw itself).
    """
    try:
        data, status = read_capped(path, ERROR_FILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if problems is not None:
            problems.append("torchrun's error file unreadable: %s" % exc)
        return None
    try:
        raw = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:
        if problems is not None:
            problems.append("torchrun's error file %s is not JSON: %s"
                            % (path, str(exc)[:200]))
        return None
    if not isinstance(raw, dict):
        return None
    message = raw.get("message")
    info: Dict[str, Any] = {}
    if isinstance(message, dict):
        extra = message.get("extraInfo")
        info = extra if isinstance(extra, dict) else {}
        message = message.get("message")
    if not isinstance(message, str):
        return None
    out: Dict[str, Any] = {"message": message}
    stack = info.get("py_callstack")
    if isinstance(stack, str):
        out["traceback"] = stack
    out["timestamp"] = _failure_time(info.get("timestamp") or raw.get("timestamp"),
                                     status.st_ctime, time.time())
    return out


def _failure_time(value: Any, written: float, now: float) -> Optional[float]:
    """The error file's timestamp as seconds, when plausible (see `read_error_file`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, str) and len(value) > 40:
        return None
    try:
        at = float(value)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(at):
        return None
    if not written - ERROR_FILE_MAX_LAG <= at <= min(written, now) + ERROR_FILE_SLACK:
        return None
    return at


def root_cause(lines: Sequence[str]) -> Optional[Dict[str, Any]]:
    """torchrun's "Root Cause (first observed failure)" block: rank, exitcode, pid,
    error_file and traceback of the rank that failed first; None when absent."""
    start = None
    for index, line in enumerate(lines):
        if "Root Cause (first observed failure)" in line:
            start = index
    if start is None:
        return None
    return _failure_fields(lines[start + 1:])


def other_failures(lines: Sequence[str]) -> List[Dict[str, Any]]:
    """The ranks torchrun's "Failures:" section lists besides the root cause (those it
    found failed too, and those its teardown signalled), each as `root_cause` gives
    one: [] when the section is absent or says <NO_OTHER_FAILURES>."""
    start = None
    for index, line in enumerate(lines):
        if line.strip() == "Failures:":
            start = index
    if start is None:
        return []
    blocks: List[List[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("=====") or line.startswith("-----"):
            break
        if _BLOCK.match(line):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    return [f for f in map(_failure_fields, blocks) if f is not None]


_BLOCK = re.compile(r"^\[\d+\]:\s*$")  # "[1]:", where a failure's fields begin


def _failure_fields(lines: Sequence[str]) -> Optional[Dict[str, Any]]:
    """One failure block's fields, read up to the section's end."""
    found: Dict[str, Any] = {}
    for line in lines:
        if line.startswith("=====") or line.startswith("-----"):
            break
        match = _ROOT_FIELD.match(line)
        if not match:
            if "traceback" in found and line.strip():
                found["traceback"] += "\n" + line.strip()
            continue
        key, value = match.group(1), match.group(2).strip()
        if key == "rank":
            number = re.match(r"(\d+)", value)
            found["rank"] = int(number.group(1)) if number else None
        elif key == "exitcode":
            code = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", value)
            if code:
                found["exitcode"] = int(code.group(1))
                found["pid"] = int(code.group(2)) if code.group(2) else None
        elif key == "error_file":
            found["error_file"] = None if value.startswith("<") else value
        else:
            found["traceback"] = value
    return found if "rank" in found else None


def _data_where(lines: Iterable[str]) -> Dict[str, Any]:
    where: Dict[str, Any] = {}
    for line in lines:
        if "file" not in where:
            match = _FILE.search(line)
            if match:
                where["file"] = match.group(1)
        if "range" not in where:
            match = _RANGE.search(line)
            if match:
                where["range"] = [int(match.group(1)), int(match.group(2))]
            else:
                match = _INDEX.search(line)
                if match:
                    where["range"] = [int(match.group(1)), int(match.group(1))]
    return where


def _exception_lines(lines: Sequence[str]) -> List[str]:
    """The exception line that ends each traceback in `lines`."""
    found = []
    in_traceback = False
    for line in lines:
        if _TRACEBACK.search(line):
            in_traceback = True
            continue
        if in_traceback:
            match = _EXCEPTION_LINE.match(line.strip())
            if match:
                found.append(line.strip())
                in_traceback = False
    return found


def classify(returncode: Optional[int], tail: Sequence[str], error: Optional[dict] = None,
             telemetry: Optional[Dict[str, Any]] = None) -> Diagnosis:
    """Name the cause of a failed attempt.

    `returncode` is torchrun's exit status (negative: killed by that signal), `tail` the
    last lines of its output, `error` what `read_error_file` returned, `telemetry` what
    the agent saw meanwhile: `{"xid": [..], "xid_unsure": [..], "ecc_unc": int}`, where
    `xid` holds the XIDs of the job's own GPUs and `xid_unsure` those of GPUs the agent
    could not tie to the job (another job's are not given). A hardware XID of the job's
    GPUs makes the failure a GPU fault; an application's XID (`APP_XIDS`: its own kernel
    faulted, or it was killed) never does, and one not known to be the job's only when
    the output names no cause: both stay in the evidence.
    """
    telemetry = telemetry or {}
    texts: List[str] = []
    if error is not None:
        texts.append(error["message"])
        if error.get("traceback"):
            texts.extend(error["traceback"].splitlines()[-20:])
    texts.extend(tail)
    root = root_cause(tail)
    # A spec the code could not even start from fails the same way on every attempt,
    # whatever else the host reports meanwhile: it is named first.
    spec_error = _spec_error(returncode, root, texts)
    if spec_error is not None:
        return spec_error
    fault, notes = _gpu_fault(telemetry)
    if fault is not None:
        return fault
    found = _from_output(returncode, tail, texts, root)
    if any(x not in APP_XIDS for x in telemetry.get("xid_unsure") or [] if x) and (
            found.cause == UNKNOWN):
        # Nothing in the output names a cause, and the host's GPU faulted meanwhile.
        return Diagnosis(GPU_FAULT, notes + found.evidence, {"gpu": telemetry.get("gpu")})
    found.evidence.extend(notes)
    return found


def hang_diagnosis(evidence: List[str], where: Dict[str, Any],
                   telemetry: Optional[Dict[str, Any]] = None) -> Diagnosis:
    """A hang (`evidence`: the silence and the stacks), or a GPU fault when the job's
    GPUs raised a hardware XID (or uncorrectable ECC errors) during the attempt: a
    faulted GPU often stalls its rank's collectives rather than crash it. Other XIDs of
    the attempt (`classify`'s telemetry) go into the evidence."""
    fault, notes = _gpu_fault(telemetry or {})
    if fault is not None:
        fault.evidence.extend(evidence)
        fault.where.update(where)
        return fault
    return Diagnosis(HANG, evidence + notes, where)


def _gpu_fault(telemetry: Dict[str, Any]) -> Tuple[Optional[Diagnosis], List[str]]:
    """A GPU fault when the telemetry holds a hardware XID of the job's GPUs or a rise
    of uncorrectable ECC errors; and the evidence lines of its other XIDs."""
    xids = [x for x in telemetry.get("xid") or [] if x]
    unsure = [x for x in telemetry.get("xid_unsure") or [] if x]
    hardware = [x for x in xids if x not in APP_XIDS]
    notes = _xid_notes([x for x in xids + unsure if x in APP_XIDS],
                       [x for x in unsure if x not in APP_XIDS])
    if not hardware and (telemetry.get("ecc_unc") or 0) <= 0:
        return None, notes
    evidence = []
    if hardware:
        evidence.append("GPU XID error(s) on the job's GPUs during the attempt: %s"
                        % ", ".join(str(x) for x in hardware[:8]))
    if telemetry.get("ecc_unc"):
        evidence.append("uncorrectable ECC errors rose by %d" % telemetry["ecc_unc"])
    return Diagnosis(GPU_FAULT, evidence + notes, {"gpu": telemetry.get("gpu")}), notes


def _xid_notes(application: Sequence[int], unsure: Sequence[int]) -> List[str]:
    """Evidence lines for XIDs that do not make a failure a GPU fault by themselves: an
    application's own (`APP_XIDS`: its kernel faulted, or it was killed), and a hardware
    XID on a GPU the agent could not tie to the job."""
    notes = []
    if application:
        notes.append("application XID(s) during the attempt (the program's own fault, not "
                     "the GPU's): %s" % ", ".join(str(x) for x in application[:8]))
    if unsure:
        notes.append("GPU XID error(s) during the attempt on a GPU not known to be the "
                     "job's: %s" % ", ".join(str(x) for x in unsure[:8]))
    return notes


def _from_output(returncode: Optional[int], tail: Sequence[str], texts: Sequence[str],
                 root: Optional[Dict[str, Any]]) -> Diagnosis:
    """The cause torchrun's output names: its root cause, the failure signatures, an
    exception, a signal."""
    loader = _loader_killed(texts, root)
    if loader is not None:
        return loader
    if root is not None:
        # The rank that failed first is the cause; its peers' errors (connection reset,
        # SIGTERM from the teardown) are consequences and must not win the vote.
        rank = root["rank"]
        where_rank = {"rank": rank}
        own = [line for line in tail if line.startswith("[rank%d]:" % rank)]
        root_error = read_error_file(Path(root["error_file"])) if root.get(
            "error_file") else None
        if root_error is not None:
            own = [root_error["message"], *(root_error.get("traceback") or "").splitlines(),
                   *own]
        found = _by_pattern(own)
        if found is not None and found.cause == NCCL:
            # Without error files torchrun's "first observed failure" is whichever rank it
            # reaped first, often a peer whose collective broke because the rank that
            # really failed went away: a failure of a rank's own (`_local_cause`) wins.
            local = _local_cause([line for line in tail if line not in own])
            if local is not None:
                return local
            peer = _killed_peer(other_failures(tail), tail)
            if peer is not None:
                return peer
        if found is not None:
            found.where.setdefault("rank", rank)
            return found
        code = root.get("exitcode")
        if isinstance(code, int) and code < 0:
            return Diagnosis(KILLED, ["rank %d (pid %s) killed by %s" % (
                rank, root.get("pid"), _signal_name(-code))], where_rank)
        exceptions = [e for e in _exception_lines(own) if not _is_consequence(e)]
        if exceptions:
            return _user_exception(exceptions, where_rank)
    found = _by_pattern(texts)
    if found is not None and found.cause == NCCL:
        found = _local_cause(texts) or found
    if found is not None:
        return found
    exceptions = _exception_lines(texts)
    real = [e for e in exceptions if not _is_consequence(e)]
    if real:
        # The first exception raised is the cause; later ones are peers tearing down.
        return _user_exception(real, {})
    killed = _killed_by_signal(returncode, texts)
    if killed is not None:
        return Diagnosis(KILLED, [killed], {})
    evidence = ["torchrun exited with code %s" % returncode, *tail[-3:]]
    return Diagnosis(UNKNOWN, evidence, {})


_LOADER_HINTS = {
    "killed": "a DataLoader worker of the job was killed (SIGKILL: most often the host's "
              "OOM killer, for host memory, not GPU memory): check the host's memory and "
              "its kernel log, and lower the loader's `num_workers` or `prefetch_factor` "
              "(or what each worker holds) before resuming",
    "bus error": "a DataLoader worker of the job died of a bus error (SIGBUS), most often "
                 "for want of shared memory: enlarge /dev/shm (a container's --shm-size), "
                 "or lower the loader's `num_workers`, then resume",
}


def _loader_killed(texts: Sequence[str], root: Optional[Dict[str, Any]]) -> Optional[Diagnosis]:
    """A DataLoader worker killed by the host (SIGKILL: its OOM killer) or dead of a bus
    error (SIGBUS: /dev/shm full): the `killed` cause with what to change, not the
    user's code (the rank only reports its worker's end as a RuntimeError)."""
    for line in texts:
        match = _LOADER_KILLED.search(line)
        if match is None or match.group(2).strip().lower() not in _LOADER_HINTS:
            continue
        how = match.group(2).strip().lower()
        where: Dict[str, Any] = {}
        prefix = _RANK_PREFIX.match(line)
        if prefix is not None:
            where["rank"] = int(prefix.group(1))
        elif root is not None:
            where["rank"] = root["rank"]
        evidence = ["a DataLoader worker (pid %s) was killed by signal: %s" % (
            match.group(1).strip(), match.group(2).strip()), _strip_rank(line).strip()[:500]]
        return Diagnosis(KILLED, evidence, where, "%s:dataloader:%s" % (KILLED, how),
                         _LOADER_HINTS[how])
    return None


def _user_exception(exceptions: List[str], where: Dict[str, Any]) -> Diagnosis:
    first = _strip_rank(exceptions[0])
    hint = None
    if _IMPORT_ERROR.search(first):
        hint = ("the training code cannot import a module (%s): install it into the "
                "environment of the job's `python`, or point `python` in the job spec at "
                "one that has it, then launch again" % first)
    return Diagnosis(USER_CODE, _dedupe(exceptions)[:3], where, "%s:%s" % (USER_CODE, first),
                     hint)


# A reason the spec's code never ran: (what, for the signature; hint; where; evidence).
_SpecFault = Tuple[str, str, Dict[str, Any], List[str]]


def _spec_error(returncode: Optional[int], root: Optional[Dict[str, Any]],
                texts: Sequence[str]) -> Optional[Diagnosis]:
    """The user's code never ran: the spec names a script, module or program this host
    lacks, code that does not compile, or arguments the script rejects. No restart can
    fix that, so it counts as the user's error (`user_code`), with a hint that names
    what to fix, rather than as an unknown failure retried until the budget is gone."""
    fault = None
    for index, line in enumerate(texts):
        fault = (_missing_script(line) or _missing_module(line)
                 or _not_compiling(texts, index) or _rejected_args(texts, index))
        if fault is not None:
            break
    else:
        code = root.get("exitcode") if root is not None else None
        fault = _exec_failure(code) or _exec_failure(returncode, texts)
    if fault is None:
        return None
    what, hint, where, evidence = fault
    if root is not None:
        where = dict(where, rank=root["rank"])
    return Diagnosis(USER_CODE, evidence, where, "%s:%s" % (USER_CODE, what), hint)


def _missing_script(line: str) -> Optional[_SpecFault]:
    match = _NO_SCRIPT.match(line)
    if not match:
        return None
    path = match.group(2) or match.group(4)
    why = match.group(3) or "a directory without a __main__.py"
    return ("script:%s" % path,
            "the job's script %s cannot be run on this host (%s): fix `script` in the job "
            "spec (a relative path is read from `workdir`) or put the file there, then "
            "launch again" % (path, why), {"file": path}, [_strip_rank(line).strip()])


def _missing_module(line: str) -> Optional[_SpecFault]:
    match = _NO_MODULE.match(line)
    if not match:
        return None
    module = match.group(2) or match.group(3)
    why = " (%s)" % match.group(4) if match.group(4) else ""
    return ("module:%s" % module,
            "%s cannot find the module %s%s: fix `module` or `python` in the job spec, or "
            "install it into that environment, then launch again" % (
                match.group(1), module, why), {}, [_strip_rank(line).strip()])


def _not_compiling(texts: Sequence[str], index: int) -> Optional[_SpecFault]:
    """The interpreter's report of a script it cannot compile: `File "…", line N`, the
    source line and the error, with no traceback (one that has a traceback is an
    exception of code that ran, e.g. an import, and is judged as such)."""
    match = _COMPILE_ERROR.match(texts[index])
    if not match or _in_traceback(texts, index):
        return None
    source = next((found for found in map(_SOURCE_AT.match, reversed(
        texts[max(0, index - 4):index])) if found), None)
    if source is None:
        return None
    path, number = source.group(1), int(source.group(2))
    return ("compile:%s:%d" % (path, number),
            "the job's script %s does not compile (%s, line %d): fix it, then launch "
            "again" % (path, match.group(1), number), {"file": path},
            [_strip_rank(source.group(0)).strip(), match.group(1)])


def _rejected_args(texts: Sequence[str], index: int) -> Optional[_SpecFault]:
    """argparse's `PROG: error: …` after its usage line: the spec's arguments (or the
    override and resume templates that add to them) are wrong."""
    match = _USAGE_ERROR.match(texts[index])
    if not match:
        return None
    if not any(map(_USAGE.match, texts[max(0, index - 20):index])):
        # No usage line: a trainer that checks its own config says `PROG: error: …` as
        # its last words (the example trainer does, for an unknown `--set` key in a
        # fork's overrides). Retrying cannot change that answer. Only when nothing else
        # in the output names a cause: a library's "x: error:" line must not hide an OOM.
        if (any(p.search(t) for _c, p in _PATTERNS for t in texts)
                or not all(map(_is_consequence, _exception_lines(texts)))):
            return None
        return ("refused:%s" % match.group(2),
                "%s refused to start (%s): fix the job's config or arguments (`args`, "
                "`override_args`, a fork's overrides), then launch again" % (
                    match.group(1), match.group(2)), {}, [_strip_rank(texts[index]).strip()])
    return ("usage:%s" % match.group(2),
            "%s rejected its command line (%s): fix `args` (or `override_args`, "
            "`resume.args`) in the job spec, then launch again" % (
                match.group(1), match.group(2)), {}, [_strip_rank(texts[index]).strip()])


def _exec_failure(code: Optional[int], texts: Sequence[str] = ()) -> Optional[_SpecFault]:
    """Exit code 127 / 126: a shell or exec found no such program, or could not run it
    (a `python` that is a wrapper script pointing at a removed environment)."""
    if code not in _EXEC_CODES:
        return None
    what = _EXEC_CODES[code]
    said = [line.strip() for line in texts if _EXEC_SAYS.search(line)][-3:]
    return ("exec:%d" % code,
            "a command of the job was %s (exit code %d): check `python` (and what it "
            "runs) in the job spec on this host, then launch again" % (what, code), {},
            ["exit code %d: a command was %s" % (code, what), *said])


def _in_traceback(texts: Sequence[str], index: int) -> bool:
    """Whether the exception line at `index` ends a traceback."""
    for line in reversed(texts[max(0, index - 50):index]):
        if _TRACEBACK.search(line):
            return True
        if _EXCEPTION_LINE.match(line.strip()):
            return False
    return False


def _by_pattern(texts: Sequence[str]) -> Optional[Diagnosis]:
    for cause, pattern in _PATTERNS:
        hits = [line for line in texts if pattern.search(line)]
        if not hits:
            continue
        evidence = _dedupe(hits)[-5:]
        where = _data_where(hits) if cause == DATA else {}
        signature = cause
        if cause == DATA and where:
            signature = "%s:%s:%s" % (cause, where.get("file"), where.get("range"))
        return Diagnosis(cause, evidence, where, signature)
    return None


# Causes that begin in the rank that shows them: a peer's failure cannot make a rank run
# out of memory, read a bad input or raise an XID, while it does break its collectives.
_LOCAL_CAUSES = (OOM, GPU_FAULT, DATA)
_RANK_PREFIX = re.compile(r"^\[\w*?(\d+)\]:")


def _local_cause(texts: Sequence[str]) -> Optional[Diagnosis]:
    """The first failure of a rank's own (`_LOCAL_CAUSES`) in `texts`, with the rank
    whose output shows it, or None."""
    for cause, pattern in _PATTERNS:
        if cause not in _LOCAL_CAUSES:
            continue
        hits = [line for line in texts if pattern.search(line)]
        if not hits:
            continue
        found = _by_pattern(hits)
        if found is None:
            continue
        prefix = _RANK_PREFIX.match(hits[0])
        if prefix is not None:
            found.where.setdefault("rank", int(prefix.group(1)))
        return found
    return None


def _killed_peer(failures: Sequence[Dict[str, Any]], tail: Sequence[str]
                 ) -> Optional[Diagnosis]:  # fmt: skip
    """A rank torchrun lists as failed because a signal killed it (SIGKILL, a crash's
    SIGSEGV …): the failure of its own that broke its peers' collective, which torchrun
    may have reaped later than the peer it then names as the root. Left out: SIGTERM,
    what torchrun's own teardown sends the ranks still running, and a rank whose own
    output shows its collective broke (a gloo error aborts the process: SIGABRT)."""
    for failure in failures:
        code, rank = failure.get("exitcode"), failure["rank"]
        if not isinstance(code, int) or code >= 0 or -code == signal.SIGTERM:
            continue
        own = _by_pattern([line for line in tail if line.startswith("[rank%d]:" % rank)])
        if own is not None and own.cause == NCCL:
            continue
        return Diagnosis(KILLED, ["rank %d (pid %s) killed by %s" % (
            rank, failure.get("pid"), _signal_name(-code))], {"rank": rank})
    return None


def _strip_rank(line: str) -> str:
    return re.sub(r"^\[\w*\d+\]:\s*", "", line)


def _is_consequence(line: str) -> bool:
    """Exceptions that only report another process's failure, not a cause of their own."""
    return bool(re.search(r"ChildFailedError|SignalException|KeyboardInterrupt|"
                          r"RendezvousClosedError|SystemExit", line))


def _killed_by_signal(returncode: Optional[int], texts: Sequence[str]) -> Optional[str]:
    for line in texts:
        match = _SIGNAL_EXIT.search(line)
        if match:
            number = int(match.group(1) or "-" + match.group(2))
            if number < 0:
                rank = None
                for other in texts:
                    found = _FAILED_RANK.search(other)
                    if found:
                        rank = found.group(1)
                        break
                return "%s killed by %s" % ("rank %s" % rank if rank is not None else "a rank",
                                            _signal_name(-number))
    if returncode is not None and returncode < 0:
        return "torchrun killed by %s" % _signal_name(-returncode)
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


def _dedupe(lines: Iterable[str]) -> List[str]:
    seen = set()
    out = []
    for line in lines:
        key = _strip_rank(line).strip()[:300]
        if key and key not in seen:
            seen.add(key)
            out.append(line.strip()[:500])
    return out


class Decision:
    """What to do after a failure: retry after `delay` seconds, or stop and say why."""

    def __init__(self, retry: bool, delay: float, reason: str, hint: Optional[str] = None,
                 budget: Optional[dict] = None) -> None:
        self.retry = retry
        self.delay = delay
        self.reason = reason
        self.hint = hint
        # The job-wide restart budget as this decision found it
        # (agent.job.restart_budget.JobBudget.judge); None where none was judged.
        self.budget = budget

    def as_dict(self) -> dict:
        out = {"retry": self.retry, "delay": self.delay, "reason": self.reason,
               "hint": self.hint}
        if self.budget is not None:
            out["budget"] = {k: v for k, v in self.budget.items() if k != "spent"}
        return out


def interruption(diagnosis: Diagnosis, decision: Decision, detected_at: float,
                 failure_at: float, attempt: int, returncode: Optional[int],
                 last_step: Optional[int], in_place: bool = False) -> dict:
    """The data of an `interruption` event (docs/protocol.md), built here only: a crash,
    a hang, a launch that failed and an elastic regroup all say the same fields.
    `in_place`: torchrun goes on with a new group, no restart by the agent."""
    data = dict(diagnosis.as_dict())
    verdict = decision.as_dict()
    if in_place:
        verdict["in_place"] = True
    data.update({
        "detected_at": detected_at,
        "detection_latency": round(max(0.0, detected_at - failure_at), 3),
        "failure_at": failure_at, "attempt": attempt, "returncode": returncode,
        "last_step": last_step, "decision": verdict,
    })
    return data


# How often the same failure may repeat before retrying is pointless.
DEFAULT_REPEAT_LIMITS = {OOM: 2, DATA: 2, USER_CODE: 2, GPU_FAULT: 2}


class RecoveryPolicy:
    """Retry with exponential backoff within a global budget; stop on failures that repeat."""

    def __init__(self, restart_budget: int = 10, backoff: float = 1.0,
                 backoff_max: float = 60.0, repeat_limits: Optional[Dict[str, int]] = None
                 ) -> None:
        if restart_budget < 0 or backoff < 0 or backoff_max < backoff:
            raise ValueError("restart_budget and backoff must be >= 0, backoff_max >= backoff")
        self.restart_budget = restart_budget
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.repeat_limits = dict(DEFAULT_REPEAT_LIMITS if repeat_limits is None
                                  else repeat_limits)
        self.history: List[Diagnosis] = []
        self.restarts = 0
        self._streak = 0

    def progressed(self) -> None:
        """The job trained a new step since the last failure: the backoff starts over."""
        self._streak = 0

    def reset(self) -> None:
        """The operator started the job again (a launch, resume or relaunch): a fresh
        budget, no failure of the run before counted as a repeat, the backoff from its
        start."""
        self.restarts = 0
        self._streak = 0
        self.history = []

    def state(self) -> Dict[str, Any]:
        """What a restarted agent needs to keep counting where this one stopped."""
        return {"restarts": self.restarts, "streak": self._streak,
                "history": [[d.cause, d.signature] for d in self.history]}

    def restore(self, state: Dict[str, Any]) -> None:
        self.restarts = int(state.get("restarts") or 0)
        self._streak = int(state.get("streak") or 0)
        self.history = [Diagnosis(str(cause), [], signature=str(signature))
                        for cause, signature in state.get("history") or []]

    def decide(self, diagnosis: Diagnosis, budget: Optional[dict] = None) -> Decision:
        """`budget`: the job-wide restart budget as judged for this failure
        (`agent.job.restart_budget.JobBudget.judge`); its `spent` reason stops the job."""
        self.history.append(diagnosis)
        same = sum(1 for d in self.history if d.signature == diagnosis.signature)
        limit = self.repeat_limits.get(diagnosis.cause)
        if limit is not None and same >= limit:
            return Decision(False, 0.0, "%s failure repeated %d times: retrying will not heal "
                            "it" % (diagnosis.cause, same), diagnosis.hint, budget)
        if budget is not None and budget.get("spent"):
            return Decision(False, 0.0, str(budget["spent"]), diagnosis.hint or (
                "the job fails for %s again and again: find out why before relaunching "
                "(a relaunch starts a fresh budget)" % budget.get("cause")), budget)
        if self.restarts >= self.restart_budget:
            return Decision(False, 0.0, "restart budget of %d used up" % self.restart_budget,
                            diagnosis.hint, budget)
        delay = min(self.backoff_max, self.backoff * (2 ** self._streak))
        self._streak += 1
        self.restarts += 1
        return Decision(True, delay, "restart %d of %d" % (self.restarts, self.restart_budget),
                        budget=budget)


class HangDetector:
    """No new step for max(floor, k × median recent step time) seconds means a hang.

    Step times come from the trainer's own `step_time`; without them the floor alone
    applies. Before an attempt's first step (imports, data preparation, rendezvous) the
    separate `startup` limit applies instead: start-up is legitimately slow and varies.

    A job at its end is never hung: once it reported its declared final step, or one of
    its ranks exited cleanly, what follows (the last evaluation and checkpoint, process
    group teardown, interpreter exit) has no step to wait for, however slow a loaded
    host makes it, and a restart would only redo the end. torchrun's exit code decides.
    """

    def __init__(self, k: float = 3.0, floor: float = 10.0, startup: float = 600.0,
                 window: int = 50) -> None:
        if k <= 0 or floor <= 0 or startup <= 0:
            raise ValueError("hang k, floor and startup must be positive")
        self.k = k
        self.floor = floor
        self.startup = startup
        self._times: Deque[float] = deque(maxlen=window)
        self.last_step: Optional[int] = None
        self.last_progress: Optional[float] = None
        self.total_steps: Optional[int] = None  # the trainer's declared final step
        self.ended: Optional[str] = None  # why this attempt is at its end, once it is

    def reset(self, now: float, new_attempt: bool = True) -> None:
        """Start watching afresh: a new attempt (steps may go back to a checkpoint's), or
        the end of a freeze (the frozen time is not silence). The declared total stays:
        it belongs to the run, and a new attempt declares it again."""
        if new_attempt:
            self.last_step = None
            self.ended = None
        self.last_progress = now

    def declare_total(self, total_steps: object) -> None:
        """The run's final step, from the trainer's `run` record (ignored unless a
        positive whole number)."""
        if isinstance(total_steps, int) and not isinstance(total_steps, bool) and (
                total_steps > 0):
            self.total_steps = total_steps

    def end(self, why: str) -> None:
        """This attempt is finishing (`why`: a rank exited cleanly): no hang from now."""
        if self.ended is None:
            self.ended = why

    def at_end(self) -> Optional[str]:
        """Why this attempt is at its end, or None while steps are still to come."""
        if self.ended is not None:
            return self.ended
        if self.total_steps is not None and self.last_step is not None and (
                self.last_step >= self.total_steps):
            return "reported its final step %d of %d" % (self.last_step, self.total_steps)
        return None

    def observe(self, step: int, step_time: Optional[float], ts: float) -> bool:
        """Record one train record; True when it is progress (a step not seen before)."""
        if isinstance(step_time, (int, float)) and step_time > 0:
            self._times.append(float(step_time))
        if self.last_step is not None and step <= self.last_step:
            return False
        self.last_step = step
        if self.last_progress is None or ts > self.last_progress:
            self.last_progress = ts
        return True

    def median_step_time(self) -> Optional[float]:
        if not self._times:
            return None
        ordered = sorted(self._times)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0

    def threshold(self) -> float:
        if self.last_step is None:
            return self.startup
        median = self.median_step_time()
        return self.floor if median is None else max(self.floor, self.k * median)

    def silent_for(self, now: float) -> float:
        return 0.0 if self.last_progress is None else max(0.0, now - self.last_progress)

    def deadline(self) -> Optional[float]:
        """When the silence becomes a hang unless a new step comes first (None: nothing
        to watch, or the attempt is at its end). The watcher sleeps until then rather
        than polling on a fixed tick, so a hang is declared at the limit, not up to a
        tick after it."""
        if self.last_progress is None or self.at_end() is not None:
            return None
        return self.last_progress + self.threshold()

    def hung(self, now: float) -> bool:
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def state(self) -> Dict[str, Any]:
        """The step-time window and the progress seen, for a restarted agent."""
        return {"times": list(self._times), "last_step": self.last_step,
                "last_progress": self.last_progress, "total_steps": self.total_steps,
                "ended": self.ended}

    def restore(self, state: Dict[str, Any]) -> None:
        self._times.clear()
        self._times.extend(float(t) for t in state.get("times") or []
                           if isinstance(t, (int, float)))
        last_step = state.get("last_step")
        self.last_step = last_step if isinstance(last_step, int) else None
        last_progress = state.get("last_progress")
        self.last_progress = (float(last_progress) if isinstance(last_progress, (int, float))
                              else None)
        self.total_steps = None
        self.declare_total(state.get("total_steps"))
        ended = state.get("ended")
        self.ended = ended if isinstance(ended, str) else None
