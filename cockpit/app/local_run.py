"""A job on this machine, watched through the real pipeline: `cockpit run` and `cockpit demo`.

Both start the host agent as a daemon here, stream its journal through the local
transport into a DuckDB recording exactly as a remote host's would come over SSH, and
launch the job through the agent with a job spec -- so it is controllable from the UI
(pause, resume, adjust, checkpoint and eval now) and recovered by the agent if it
crashes or hangs. Leaving stops everything that was started: the agent stops the job it
supervises. `cockpit run -- CMD…` builds the job spec from a plain command line
(`job_spec_from_command`), so watching `python train.py` needs no spec file.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TypeVar

from agent.wire import states
from agent.wire.launch_spec import MAX_NPROC_PER_NODE
from cockpit.app.operations import wait_streaming
from cockpit.control.controller import Controller
from cockpit.control.jobspec import JobSpec, name_problem
from cockpit.errors import CockpitError
from cockpit.sessions.live import LiveSession, LiveSource
from cockpit.transport.inventory import LOCAL_ADDRESS, HostSpec

STOP_GRACE_S = 20.0
CONNECT_TIMEOUT_S = 60.0
RECORDING_NAME = "recording.duckdb"
# `python`, `python3`, `python3.11`, `pypy3`: the interpreters a command may start with.
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?$")
_TORCHRUN_NPROC = ("--nproc-per-node", "--nproc_per_node")
_Run = TypeVar("_Run", bound="LocalRun")


class LocalRun(ABC):
    """The agent daemon, the live session and the launched job, as one context manager.

    A subclass says which job to launch (`job_spec`). The run's folder holds the agent's
    state dir (`agent/`), the job's run dir (`run/`: spool, logs, control files,
    checkpoints), the daemon's `agent.log` and the recording.
    """

    noun = "run"  # how messages name it: "the run's folders", "the run's agent daemon"

    def __init__(self, run_root: Path, simulate_gpus: int = 0) -> None:
        if simulate_gpus < 0:
            raise CockpitError(f"--simulate-gpus must be 0 or more, not {simulate_gpus}")
        self.run_root = Path(run_root).resolve()
        self.state_dir = self.run_root / "agent"
        self.run_dir = self.run_root / "run"
        self.store_path = self.run_root / RECORDING_NAME
        self.simulate_gpus = simulate_gpus
        self._daemon: subprocess.Popen[bytes] | None = None
        self.session: LiveSession | None = None

    @abstractmethod
    def job_spec(self, host: str) -> JobSpec:
        """The spec of the job this run launches on `host` (the demo's, or the command's)."""

    def daemon_argv(self) -> list[str]:
        return [
            sys.executable, "-m", "agent", "run",
            "--state-dir", str(self.state_dir), "--run-dir", str(self.run_dir),
            "--simulate-gpus", str(self.simulate_gpus),
            # Its own session (a ctrl-c in the terminal is the cockpit's to handle), so
            # no signal of the terminal reaches it: it ends with this process instead,
            # however that ends (a closed terminal, a kill).
            "--exit-with", str(os.getpid()),
        ]

    def __enter__(self: _Run) -> _Run:
        try:
            for path in (self.state_dir, self.run_dir):
                path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CockpitError(f"--dir {self.run_root}: cannot make the {self.noun}'s "
                               f"folders there ({exc.strerror or exc}): give a folder, new "
                               f"or one of an earlier {self.noun}") from None
        log = open(self.run_root / "agent.log", "ab")
        try:
            self._daemon = subprocess.Popen(
                self.daemon_argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, cwd=self.run_root,
            )
        finally:
            log.close()
        host = HostSpec(
            name=socket.gethostname() or "local", address=LOCAL_ADDRESS,
            state_dir=str(self.state_dir), run_dirs=(str(self.run_dir),),
        )
        try:
            self.session = LiveSession([host], self.store_path).start()
            wait_streaming(self.session, [host.name], CONNECT_TIMEOUT_S)
            self._check_daemon()
            controller = Controller(self.job_spec(host.name), self.session.fleet.send)
            controller.launch()
            self.session.source.controller = controller
        except BaseException:
            if self.session is not None:
                self.session.stop()
            self._stop_daemon()
            raise
        return self

    @property
    def source(self) -> LiveSource:
        assert self.session is not None
        return self.session.source

    def record_for(self, seconds: float) -> None:
        """Record for `seconds`, or until the job has trained its last step: past its
        end a headless run would only add idle samples to the recording."""
        assert self.session is not None
        self.session.record_for(seconds, done=self.finished)

    def finished(self) -> bool:
        """Whether the job ran to its end and exited cleanly (a crash it recovers from,
        or a failure, is not an end: the agent may start it again)."""
        return self.source.snapshot().progress.state == states.FINISHED

    def __exit__(self, *exc: object) -> None:
        try:
            if self.session is not None:
                self.session.stop()
        finally:
            self._stop_daemon()

    def _check_daemon(self) -> None:
        """The agent daemon refused to start (its arguments, its state dir): its reason
        is in agent.log, which the operator would otherwise never open."""
        proc = self._daemon
        if proc is None or proc.poll() is None:
            return
        log = self.run_root / "agent.log"
        try:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        except OSError:
            tail = []
        why = "\n  ".join(tail) or "(agent.log is empty)"
        raise CockpitError(f"the {self.noun}'s agent daemon exited with status "
                           f"{proc.returncode} before the job started; {log} ends:\n  {why}")

    def _stop_daemon(self) -> None:
        proc = self._daemon
        if proc is None or proc.poll() is not None:
            return
        # The daemon stops the job it supervises on SIGTERM; SIGKILL the group as a last
        # resort so that no training process is left behind.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


class CommandRun(LocalRun):
    """`cockpit run -- CMD…`: the job spec built from a plain command line."""

    def __init__(self, command: list[str], *, run_root: Path | None = None,
                 job: str | None = None, nproc: int | None = None,
                 simulate_gpus: int = 0, cwd: Path | None = None) -> None:  # fmt: skip
        self.cwd = (cwd or Path.cwd()).resolve()
        self.command = list(command)
        self.parsed = parse_command(self.command, self.cwd)
        self.job = job if job is not None else self.parsed.default_job
        problem = name_problem(self.job)
        if problem is not None:
            raise CockpitError(f"job name {problem}: give another with --job NAME")
        if nproc is not None and self.parsed.nproc is not None and nproc != self.parsed.nproc:
            raise CockpitError(f"--nproc {nproc} and torchrun's --nproc-per-node "
                               f"{self.parsed.nproc} disagree: give one of them")
        self.nproc = nproc or self.parsed.nproc or 1
        if self.nproc > MAX_NPROC_PER_NODE:
            raise CockpitError(f"{self.nproc} processes: at most {MAX_NPROC_PER_NODE} run "
                               "on one host")
        if run_root is None:
            run_root = self.cwd / "runs" / f"{self.job}-{time.strftime('%Y%m%d-%H%M%S')}"
        super().__init__(run_root, simulate_gpus)

    def job_spec(self, host: str) -> JobSpec:
        return job_spec_from_command(self.parsed, name=self.job, host=host,
                                     nproc=self.nproc, run_dir=self.run_dir,
                                     workdir=self.cwd)  # fmt: skip


class ParsedCommand:
    """What `cockpit run` understood of a command: interpreter, script or module, args."""

    def __init__(self, python: str, script: str, module: bool, args: list[str],
                 nproc: int | None) -> None:  # fmt: skip
        self.python, self.script, self.module = python, script, module
        self.args, self.nproc = args, nproc

    @property
    def default_job(self) -> str:
        """The script's name without `.py` (`train`), or the module's last part."""
        if self.module:
            return self.script.rpartition(".")[2]
        return Path(self.script).stem


def _usage(got: str) -> CockpitError:
    return CockpitError(
        f"cockpit run starts a Python training script under torchrun, so it takes "
        f"`python SCRIPT ARGS…`, `python -m MODULE ARGS…` or `torchrun [--standalone] "
        f"[--nproc-per-node N] SCRIPT ARGS…` after --; {got}. For anything else, write a "
        f"job spec and use `cockpit launch` (docs/getting-started.md)")


def parse_command(command: list[str], cwd: Path) -> ParsedCommand:
    """The interpreter, script (or module) and arguments of `command`; CockpitError says
    what is not understood. The agent runs every job under torchrun, which takes the
    script and its arguments; the interpreter's own options cannot pass through it."""
    if not command:
        raise CockpitError("cockpit run: give the command to run after --, e.g. "
                           "`cockpit run -- python train.py`")
    program, rest = command[0], command[1:]
    name = Path(program).name
    nproc: int | None = None
    if name == "torchrun":
        found = shutil.which(program)
        sibling = Path(found).parent / "python" if found else None
        python = str(sibling) if sibling is not None and sibling.exists() else sys.executable
        while rest and rest[0].startswith("-"):
            option, _, value = rest[0].partition("=")
            if option == "--standalone" and not value:
                rest = rest[1:]
            elif option in _TORCHRUN_NPROC:
                if not value:
                    if len(rest) < 2:
                        raise _usage(f"{option} needs a number")
                    value, rest = rest[1], rest[1:]
                rest = rest[1:]
                if not value.isdigit() or int(value) < 1:
                    raise _usage(f"{option} {value!r} is not a number of processes")
                nproc = int(value)
            else:
                raise _usage(f"torchrun's option {option} is not supported here (the agent "
                             "runs one host's torchrun --standalone)")
    elif _PYTHON.match(name) or Path(program) == Path(sys.executable):
        python = shutil.which(program) or program
        if not Path(python).is_absolute():
            raise _usage(f"{program!r} is not an interpreter found on PATH")
        while rest and rest[0] == "-u":  # unbuffered: torchrun's workers are anyway
            rest = rest[1:]
        if rest and rest[0] == "-m":
            if len(rest) < 2:
                raise _usage("-m needs a module name")
            return ParsedCommand(str(Path(python).absolute()), rest[1], True, rest[2:], None)
        if rest and rest[0].startswith("-"):
            raise _usage(f"the interpreter's option {rest[0]} cannot pass through torchrun "
                         "(set PYTHON* environment variables instead)")
    else:
        raise _usage(f"got {program!r}")
    if not rest:
        raise _usage("no script was given")
    script = (cwd / rest[0]).resolve()
    if not script.is_file():
        raise CockpitError(f"cockpit run: {rest[0]}: no such script (looked in {cwd})")
    return ParsedCommand(str(Path(python).absolute()), str(script), False, rest[1:], nproc)


def job_spec_from_command(parsed: ParsedCommand, *, name: str, host: str, nproc: int,
                          run_dir: Path, workdir: Path) -> JobSpec:  # fmt: skip
    """The job spec `cockpit launch` would take for this command on this machine.

    A restart resumes through `COCKPIT_RESUME_FROM` (the agent sets it to the newest
    valid checkpoint), so no resume arguments are added to the command. GLOO_SOCKET_IFNAME
    defaults to the loopback interface: every rank runs on this machine, and gloo
    otherwise picks the interface of the host name, which containers often lack.
    """
    env = {} if "GLOO_SOCKET_IFNAME" in os.environ else {"GLOO_SOCKET_IFNAME": "lo"}
    return JobSpec(
        name=name, hosts=(host,), nproc_per_node=nproc, python=parsed.python,
        script=parsed.script, module=parsed.module, args=tuple(parsed.args),
        run_dir=str(run_dir), workdir=str(workdir), env=env,
    )
