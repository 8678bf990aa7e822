"""Why a job is stuck before its first step, read from torchrun's own output.

A job whose rendezvous endpoint the host cannot resolve loops quietly for minutes (c10d
retries the name lookup until its connect timeout, then retries the connect), so the
start-up hang limit (`hang.startup`, 600 s by default) would be the first word an
operator gets. torchrun and c10d do say what is wrong, in a line the agent already tails;
this module names it the moment such a line appears, with the fix:

- the endpoint's name does not resolve on this host (`gai error: -2 - Name or service
  not known`, or a DNS that is temporarily failing, `-3`): c10d's own retries log it;
- the endpoint resolves but nothing answers there (`The client socket has timed out
  after …ms while trying to connect to (HOST, PORT)`);
- the port the rendezvous store (or `--master-port`) must listen on is taken on this host
  (`EADDRINUSE` / `Address already in use`);
- the training code cannot import a module (`ModuleNotFoundError` / `ImportError`).

Only lines that are definite are read as a fault: a `Connection refused` is what every
host but the store's sees until that host's torchrun is up, so it is no fault by itself,
and a name that lacks only an IPv6 address (`gai error: -5`) resolves over IPv4. Pure:
`classify` reads one line; `StartupWatch` keeps one report per fault and attempt.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional, Set, Tuple

# The agent's alert codes for these faults. The cockpit ends one, like `launch_failed`,
# once the start is no longer pending: the host's part made a step after it, the
# operator started it again, stopped or paused the job, or took the host out of it.
UNRESOLVABLE = "rdzv_unresolvable"
UNREACHABLE = "rdzv_unreachable"
PORT_IN_USE = "port_in_use"
IMPORT_ERROR = "import_error"
CODES = (UNRESOLVABLE, UNREACHABLE, PORT_IN_USE, IMPORT_ERROR)

# glibc's getaddrinfo codes that mean the name itself does not resolve (EAI_NONAME) or the
# resolver cannot answer now (EAI_AGAIN). EAI_NODATA/-5 and EAI_ADDRFAMILY/-9 only say the
# name lacks an address of the family asked for, which c10d then asks for in the other.
_NAME_UNKNOWN = {-2: "the name is not known", -3: "name resolution failed temporarily"}

_PREFIX = re.compile(r"^\[(?:rank|default)?(\d+)\]:")
_GAI = re.compile(r"network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) cannot be "
                  r"retrieved \(gai error: (?P<code>-?\d+) - (?P<why>[^)]*)\)")
_TIMED_OUT = re.compile(r"The client socket has timed out after (?P<ms>\d+)ms while trying "
                        r"to connect to \((?P<host>[^,()]+), (?P<port>\d+)\)")
_IN_USE_LISTEN = re.compile(r"failed to listen on any local network address\. port: "
                            r"(?P<port>\d+).*EADDRINUSE")
_IN_USE_BIND = re.compile(r"failed to bind to \[?(?P<addr>[^\]\s]*)\]?:(?P<port>\d+) "
                          r"\(errno: 98 - Address already in use\)")
_NO_MODULE = re.compile(r"^\s*ModuleNotFoundError: No module named '(?P<module>[^']+)'")
_CANNOT_IMPORT = re.compile(r"^\s*ImportError: cannot import name '(?P<name>[^']+)' from "
                            r"'(?P<module>[^']+)'")


class StartupFault(NamedTuple):
    """One named fault: `code` (the alert code), `what` it is and `fix` (what to try),
    `where` (rank, endpoint), the `line` it was read from, and `key`, what makes two
    sightings the same fault (an endpoint, a port, a module)."""

    code: str
    what: str
    fix: str
    where: Dict[str, object]
    line: str
    key: str


def _rank(line: str) -> Tuple[Optional[int], str]:
    match = _PREFIX.match(line)
    if not match:
        return None, line
    return int(match.group(1)), line[match.end():]


def _where(rank: Optional[int], **parts: object) -> Dict[str, object]:
    where: Dict[str, object] = {k: v for k, v in parts.items() if v is not None}
    if rank is not None:
        where["rank"] = rank
    return where


def classify(line: str) -> Optional[StartupFault]:
    """The start-up fault `line` (one line of the job's output) reports, else None."""
    rank, text = _rank(line)
    if len(text) > 8192:  # a clipped log line is at most 4 KiB; anything longer is no report
        return None
    match = _GAI.search(text)
    if match and int(match.group("code")) in _NAME_UNKNOWN:
        host, port = match.group("host").strip(), match.group("port")
        endpoint = "%s:%s" % (host, port)
        return StartupFault(
            UNRESOLVABLE,
            "the rendezvous endpoint %s does not resolve on this host (%s: %s)" % (
                endpoint, _NAME_UNKNOWN[int(match.group("code"))], match.group("why")),
            "use a name or address every host of the job resolves (an ssh alias from "
            "~/.ssh/config is not one): set the rendezvous endpoint to the rank-0 host's "
            "address as the hosts see it (`getent hosts %s` on the host tells), then "
            "launch again; `cockpit check` tests it from every host" % host,
            _where(rank, endpoint=endpoint), line, endpoint)
    match = _TIMED_OUT.search(text)
    if match:
        endpoint = "%s:%s" % (match.group("host").strip(), match.group("port"))
        return StartupFault(
            UNREACHABLE,
            "nothing answered at the rendezvous endpoint %s for %d s" % (
                endpoint, int(match.group("ms")) // 1000),
            "check that the host at %s runs its part of the job (its torchrun listens "
            "there) and that a firewall between the hosts lets port %s through (`nc -vz "
            "%s %s` from this host), then launch again" % (
                endpoint, match.group("port"), match.group("host").strip(),
                match.group("port")),
            _where(rank, endpoint=endpoint), line, endpoint)
    match = _IN_USE_LISTEN.search(text) or _IN_USE_BIND.search(text)
    if match:
        port = match.group("port")
        return StartupFault(
            PORT_IN_USE,
            "port %s is already in use on this host: the rendezvous store cannot listen "
            "on it" % port,
            "find what holds it (`ss -ltnp 'sport = :%s'`; often an earlier run's torchrun "
            "still alive) and stop it, or choose another port for the rendezvous endpoint "
            "(`rdzv_endpoint`), then launch again" % port,
            _where(rank, port=int(port)), line, port)
    match = _NO_MODULE.search(text) or _CANNOT_IMPORT.search(text)
    if match:
        module = match.group("module")
        name = match.groupdict().get("name")
        what = ("the job cannot import %s from %s" % (name, module) if name else
                "the job's Python has no module %s" % module)
        return StartupFault(
            IMPORT_ERROR, what,
            "install %s into the Python the job runs on this host (the spec's `python`; "
            "`python -c 'import %s'` there shows the error), or fix the job's PYTHONPATH "
            "or `workdir`, then launch again" % (module.split(".")[0], module),
            _where(rank, module=module), line, module)
    return None


class StartupWatch:
    """The faults seen in one attempt's output, each reported once: c10d repeats its
    lookup failure on every retry, and every rank prints the same import error.

    An endpoint reported as unresolvable is not reported again as unreachable when the
    connect then times out: the name is the cause, the timeout its consequence."""

    def __init__(self) -> None:
        self._seen: Set[Tuple[str, str]] = set()

    def reset(self) -> None:
        """A new attempt: its faults are news again."""
        self._seen.clear()

    def feed(self, line: str) -> Optional[StartupFault]:
        """The fault `line` reports, the first time it is seen; else None."""
        fault = classify(line)
        if fault is None or (fault.code, fault.key) in self._seen:
            return None
        if fault.code == UNREACHABLE and (UNRESOLVABLE, fault.key) in self._seen:
            return None
        self._seen.add((fault.code, fault.key))
        return fault
