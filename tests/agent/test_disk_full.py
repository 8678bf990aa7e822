"""A full (or failing) journal disk on a GPU host: the journal keeps whole lines only,
holds what it cannot write and writes it when space returns, tells the cockpit (an alert
while it lasts, an `info` alert with the same code and place when it ends, a `dropped`
event for what memory could not hold); the sampler and the spool tailer carry on; a job
is still watched and can always be stopped.

A true ENOSPC comes from a small tmpfs mounted for the test (root only: skipped, saying
so, where mounting is not allowed); the same paths are also driven by an ENOSPC injected
into the journal's writes, which runs anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.daemon import Daemon, DaemonConfig, ObservedJournal
from agent.hostinfo import hostname
from agent.job.supervisor import Supervisor, alive
from agent.journal.full import RESERVE_NAME
from agent.journal.journal import Journal, JournalFull, JournalReader, list_segments
from agent.journal.spool import SpoolTailer
from agent.samplers.sim import SimGpus
from tests.agent.conftest import SpoolWriter
from tests.harness.waiting import wait_for

SLEEPER = [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(0.2)"]


def _wait_for(cond: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """`timeout` only bounds a hang (`tests.harness.waiting.wait_for`, polled every 20 ms)."""
    wait_for(cond, timeout, what, poll=0.02)


class TmpfsDisk:
    """A tmpfs of `size` bytes at `path`, filled and emptied by a ballast file."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                   str(path)], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot mount a small tmpfs for a real ENOSPC: {exc}")
        if done.returncode != 0:
            pytest.skip("cannot mount a small tmpfs for a real ENOSPC (needs root): "
                        + (done.stderr.strip() or f"mount exited {done.returncode}"))
        self.ballast = path / "ballast"

    def fill(self) -> None:
        """Take every free byte (as another process filling the disk would)."""
        with open(self.ballast, "ab", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(bytes(4096))
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"x")

    def free(self) -> None:
        self.ballast.unlink()

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)


class InjectedDisk:
    """ENOSPC from every write (`os.write`, `os.posix_fallocate`) to a file under
    `path` while full; other files are left alone."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.full = False
        real_write, real_fallocate = os.write, os.posix_fallocate

        def under(fd: int) -> bool:
            try:
                return os.readlink(f"/proc/self/fd/{fd}").startswith(str(path))
            except OSError:
                return False

        def write(fd: int, data: bytes) -> int:
            if self.full and under(fd):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(fd, data)

        def fallocate(fd: int, offset: int, length: int) -> None:
            if self.full and under(fd):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_fallocate(fd, offset, length)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "posix_fallocate", fallocate)

    def fill(self) -> None:
        self.full = True

    def free(self) -> None:
        self.full = False

    def close(self) -> None:
        self.full = False


@pytest.fixture(params=["tmpfs", "injected"])
def disk(request: pytest.FixtureRequest, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[TmpfsDisk | InjectedDisk]:
    where = tmp_path / "state"
    made = (TmpfsDisk(where, 1 << 20) if request.param == "tmpfs"
            else InjectedDisk(where, monkeypatch))
    try:
        yield made
    finally:
        made.close()


def _lines(state_dir: Path) -> list[bytes]:
    """Every byte of every segment, as lines; asserts there is no torn tail."""
    out: list[bytes] = []
    for _, path in list_segments(state_dir / "journal"):
        raw = path.read_bytes()
        assert not raw or raw.endswith(b"\n"), f"torn tail in {path.name}: {raw[-60:]!r}"
        out.extend(raw.splitlines())
    return out


def _records(state_dir: Path) -> list[dict]:
    """Every journaled record, checked whole and numbered 1, 2, 3, … with no gap."""
    records = [json.loads(line) for line in _lines(state_dir)]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    return records


def test_a_failed_write_leaves_whole_lines_and_no_seq_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills in the middle of a batch: the lines that reached it whole stay,
    the torn rest is cut at once, and what did not fit is written later with the next
    seqs; before, the torn bytes stayed, the next record was glued onto them and the
    seqs of the lines already there were given again."""
    journal = Journal(tmp_path, retry_every=0)
    journal.append_many([("event", {"kind": "note", "msg": f"a{i}"}) for i in range(3)])
    real_write = os.write
    calls = []

    def short_then_full(fd: int, data: bytes) -> int:
        if fd != journal._fd:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:  # the first record whole and half the second, then full
            first = bytes(data).index(b"\n") + 1
            return real_write(fd, bytes(data[: first + 20]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", short_then_full)
    with contextlib.suppress(OSError):  # the old journal let the error out
        journal.append_many([("event", {"kind": "note", "msg": f"b{i}"}) for i in range(3)])
    # Readers meanwhile take whole lines only, and the torn bytes are already gone.
    seen = [json.loads(line) for line in _lines(tmp_path)]
    assert [r.get("msg") for r in seen if r["kind"] == "note"] == ["a0", "a1", "a2", "b0"]
    monkeypatch.setattr(os, "write", real_write)
    journal.append("event", {"kind": "note", "msg": "after"})
    journal.close()
    records = _records(tmp_path)
    notes = [r["msg"] for r in records if r.get("kind") == "note"]
    assert notes == ["a0", "a1", "a2", "b0", "b1", "b2", "after"]
    assert journal.fault is None and journal.held == 0


@pytest.mark.parametrize("segment_bytes", [None, 1024], ids=["one-segment", "rotating"])
def test_full_disk_is_alerted_held_and_written_when_space_returns(
        disk: TmpfsDisk | InjectedDisk, segment_bytes: int | None) -> None:
    """Sampler records made while the disk is full are held, not lost and not raised;
    the cockpit is told where and what to do; once space returns they are written in
    order, and an `info` alert with the same code and place says it is over. With
    small segments the journal also moves to new files while full and after."""
    state = disk.path
    journal = Journal(state, retry_every=0, segment_bytes=segment_bytes)
    journal.append("hello", {"agent_version": "t"})
    disk.fill()
    made = 0
    while journal.fault is None:  # the segment's last page may take a few more lines
        assert made < 1000, "the journal never noticed the full disk"
        journal.append_many([("gpu", {"gpu": 0, "util": made})])
        made += 1
    for _ in range(20):
        assert journal.append_many([("gpu", {"gpu": 0, "util": made})]) == []  # held
        made += 1
    fault = journal.fault
    assert fault.code == "journal_disk_full"
    assert journal.held >= 20
    assert not (state / "journal" / RESERVE_NAME).exists()  # given back for the alert
    during = _records(state)
    if isinstance(disk, TmpfsDisk):
        # The reserve's room let the alert through while the disk is still full.
        alert = during[-1]
        assert (alert["t"], alert["severity"], alert["code"]) == (
            "alert", "critical", "journal_disk_full")
        assert alert["what"].startswith(f"journal disk full on {hostname()} ({state}/journal,")
        assert "bytes free" in alert["what"] and alert["where"] == {"file": f"{state}/journal"}
        assert str(state) in alert["hint"] and "free space" in alert["hint"]
    held = journal.held
    disk.free()
    assert journal.append("gpu", {"gpu": 0, "util": 99}) is not None
    journal.close()
    records = _records(state)
    utils = [r["util"] for r in records if r["t"] == "gpu"]
    assert utils == [*range(made), 99]  # every one, once, in order
    alerts = [r for r in records if r["t"] == "alert"]
    assert [a["severity"] for a in alerts] == ["critical", "info"]
    assert alerts[0]["where"] == alerts[1]["where"] and alerts[0]["code"] == alerts[1]["code"]
    assert f"{held} held records written" in alerts[1]["what"]
    assert not [r for r in records if r.get("kind") == "dropped"]  # nothing was dropped
    assert journal.fault is None and journal.held == 0
    assert (state / "journal" / RESERVE_NAME).exists()  # held back again for next time


def test_held_records_past_their_memory_drop_samples_first_and_say_so(
        disk: TmpfsDisk | InjectedDisk) -> None:
    """Memory for held records is bounded: past it the oldest samples go, events stay,
    and a `dropped` event counts exactly what went, by type."""
    state = disk.path
    journal = Journal(state, retry_every=0, hold_bytes=4096)
    disk.fill()
    hosts = 0
    while journal.fault is None:  # the segment's last page may take a few more lines
        journal.append("host", {"cpu": 1.0})
        hosts += 1
    journal.append("event", {"kind": "job_exited", "job": "j", "msg": "kept"})
    for i in range(200):
        journal.append("gpu", {"gpu": 0, "util": i})
    journal.append("event", {"kind": "job_started", "job": "j", "msg": "kept too"})
    disk.free()
    assert journal.retry(force=True)
    journal.close()
    records = _records(state)
    assert [r["msg"] for r in records if r["t"] == "event" and r["kind"].startswith("job_")
            ] == ["kept", "kept too"]
    utils = [r["util"] for r in records if r["t"] == "gpu"]
    assert utils == list(range(200 - len(utils), 200))  # the newest samples survive
    dropped = [r for r in records if r.get("kind") == "dropped"]
    assert len(dropped) == 1
    data = dropped[0]["data"]
    assert data["reason"] == "disk full" and data["count"] == sum(data["by_type"].values())
    assert data["by_type"]["gpu"] == 200 - len(utils) > 0
    # Every sample is either journaled or counted as dropped: the gap is told exactly.
    assert data["by_type"].get("host", 0) + sum(r["t"] == "host" for r in records) == hosts
    assert f"dropped {data['count']} records" in dropped[0]["msg"]
    info = [r for r in records if r["t"] == "alert"][-1]
    assert info["severity"] == "info" and f"{data['count']} dropped" in info["what"]


def test_spool_records_wait_in_their_files_while_the_journal_is_full(
        tmp_path: Path, disk: TmpfsDisk | InjectedDisk) -> None:
    """The spool tailer is refused while the journal cannot write and reads the same
    lines again once it can: each trainer record is journaled once, none lost."""
    journal = Journal(disk.path, retry_every=0)
    run_dir = tmp_path / "run"
    writer = SpoolWriter(run_dir, "j", 0)
    writer.new_file()
    tailer = SpoolTailer(ObservedJournal(journal, lambda t, fields: None), [run_dir])
    writer.train(1)
    assert tailer.poll() == 1
    disk.fill()
    while journal.fault is None:  # the segment's last page may take a few more lines
        journal.append("host", {"cpu": 1.0})
    for step in range(2, 6):
        writer.train(step)
    with pytest.raises(JournalFull):
        tailer.poll()
    with pytest.raises(JournalFull):  # still full: refused again, nothing consumed
        tailer.poll()
    disk.free()
    assert tailer.poll() == 4
    assert tailer.poll() == 0
    journal.close()
    steps = [r["step"] for r in _records(disk.path) if r["t"] == "train"]
    assert steps == [1, 2, 3, 4, 5]


def test_stop_signals_the_job_even_when_nothing_can_be_journaled(tmp_path: Path) -> None:
    """Stopping signals first and journals after, best effort: before, the stop note
    was written first, and a write error left the job running with nobody watching."""
    journal = Journal(tmp_path / "state")
    sup = Supervisor(SLEEPER, "j", tmp_path / "run", journal)
    pid = sup.start()

    def broken(*args: object, **kwargs: object) -> list[int]:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    journal.append_many = broken  # type: ignore[method-assign]
    sup.ended_for = "stop"
    try:
        with contextlib.suppress(OSError):  # the old stop raised before any signal
            sup.stop(grace=10.0)
        _wait_for(lambda: not alive(pid), "the job to end")
        assert sup.wait(10.0) == -15 and not sup.running  # its end is known all the same
    finally:
        sup.signal_tree(9)
        journal.close()


@pytest.mark.slow
def test_daemon_samples_through_a_full_disk_and_stops_its_job(
        tmp_path: Path, disk: TmpfsDisk | InjectedDisk) -> None:
    """The disk fills while a daemon runs a job: the sampler keeps sampling (held in
    memory), the daemon keeps running and its job keeps being watched; space returns and
    everything held is written; the disk fills again and the daemon still stops its job
    and exits cleanly, saying what it could not write."""
    logs: list[str] = []
    config = DaemonConfig(disk.path, run_dirs=[tmp_path / "run"], interval=0.25,
                          cmd=SLEEPER, job="dfjob", stop_grace=5.0)
    daemon = Daemon(config, gpus=SimGpus(1), log=logs.append)
    daemon.journal._retry_every = 0.0
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    thread.start()
    state = disk.path

    def gpu_seqs() -> list[int]:
        return [r["seq"] for r in JournalReader(state).records() if r["t"] == "gpu"]

    try:
        _wait_for(lambda: gpu_seqs() and daemon.supervisor is not None, "a first sample")
        sup = daemon.supervisor
        assert sup is not None and sup.running
        disk.fill()
        _wait_for(lambda: daemon.journal.fault is not None, "a failed journal write")
        held = daemon.journal.held
        _wait_for(lambda: daemon.journal.held >= held + 3, "three more sampler rounds")
        assert thread.is_alive() and sup.running and sup.pid_ranks()
        disk.free()
        _wait_for(lambda: daemon.journal.fault is None, "the held records to be written")
        info = [r for r in JournalReader(state).records() if r["t"] == "alert"][-1]
        assert info["severity"] == "info"
        _wait_for(lambda: gpu_seqs()[-1] > info["seq"], "sampling written again")
        assert not [line for line in logs if "sampler failed" in line]
        disk.fill()
        _wait_for(lambda: daemon.journal.held > 0, "records held again")
        pid = sup.pid
        assert pid is not None
        daemon.stop()
        thread.join(60)
        assert not thread.is_alive() and result == [0]
        assert not alive(pid) and not sup.running
        # What was still held at the end is written, or said to be lost, with its count.
        lost = daemon.journal.held
        assert not lost or any(f"journal: {lost} records held in memory could not be "
                               "written before closing" in line and "lost" in line
                               for line in logs), "\n".join(logs)
    finally:
        daemon.stop()
        thread.join(60)
        if daemon.supervisor is not None:
            daemon.supervisor.signal_tree(9)
    disk.free()
    _records(state)  # whole lines only, numbered without a gap


def test_a_control_op_reaches_the_inbox_once_its_disk_has_room(
        disk: TmpfsDisk | InjectedDisk) -> None:
    """A stop sent while the disk is full is kept and handed over when there is room,
    whole and once; before, the failed write ended the stream's control reader and the
    op was lost without a word."""
    from agent.journal.control_inbox import inbox_path
    from agent.journal.stream import _ControlReader

    state = disk.path
    read_end, write_end = os.pipe()
    said = io.StringIO()
    reader = _ControlReader(state, read_end, said)
    disk.fill()
    reader.start()
    try:
        os.write(write_end, b'{"op":"stop","id":"op-1","job":"j"}\n')
        _wait_for(lambda: "retrying" in said.getvalue(), "the failed hand-over")
        assert "'stop'" in said.getvalue() and "'op-1'" in said.getvalue()
        assert reader.is_alive() and not reader.eof.is_set()
        disk.free()

        def handed() -> list[dict]:
            try:
                raw = inbox_path(state).read_bytes()
            except FileNotFoundError:
                return []
            return [json.loads(line) for line in raw.splitlines() if line.strip()]

        _wait_for(lambda: any(e.get("id") == "op-1" for e in handed()), "the op in the inbox")
    finally:
        os.close(write_end)
        reader.join(10)
        os.close(read_end)
    assert [e["op"] for e in handed() if e.get("id") == "op-1"] == ["stop"]
    assert "lost" not in said.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pause_the_disk_cannot_take_fails_and_the_job_goes_on_watched(
        tmp_path: Path) -> None:
    """A pause needs a line in the job's control file; on a full run dir that write
    fails. The pause says it failed and the job keeps running, watched, and stops when
    asked; before, the error ended the job's thread, which stopped the job. (One run,
    on a real full tmpfs where it can be mounted: torchrun makes it slow.)"""
    pytest.importorskip("torch")  # every attempt starts under torchrun
    from agent.job.launch import LaunchSpec
    from agent.job.managed import RUNNING, STOPPED, ManagedJob

    disk: TmpfsDisk | None
    try:
        disk = TmpfsDisk(tmp_path / "full", 1 << 20)
    except pytest.skip.Exception:
        disk = None
    run_dir = (disk.path if disk is not None else tmp_path) / "run"
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.2)\n")
    spec = LaunchSpec({"name": "fulljob", "python": sys.executable, "script": str(script),
                       "nproc_per_node": 1, "run_dir": str(run_dir), "stop_grace": 2,
                       "env": {"OMP_NUM_THREADS": "1"}})
    journal = Journal(tmp_path / "state")
    job = ManagedJob(spec, journal, {}, log=lambda msg: None)
    job.start()
    try:
        _wait_for(lambda: job.state == RUNNING and job.supervisor is not None
                  and job.supervisor.running, "the job to start", timeout=60)
        if disk is not None:
            disk.fill()
        else:  # the same OSError where a full disk gives it: the control file's write
            (run_dir / "control").mkdir(exist_ok=True)
            (run_dir / "control" / "fulljob.ndjson").mkdir()
        job.request("pause", {"id": "p-1"})

        def paused() -> list[dict]:
            return [r for r in JournalReader(tmp_path / "state").records()
                    if r["t"] == "event" and r["kind"] == "pause"]

        _wait_for(paused, "the pause's outcome")
        (event,) = paused()
        assert event["data"]["ok"] is False and event["data"]["mode"] == "checkpoint"
        assert "the job goes on as it was (running)" in event["msg"]
        sup = job.supervisor
        assert sup is not None and sup.running and job.state == RUNNING
        pids = list(sup.tree_pids())
        assert pids and all(alive(p) for p in pids)
        job.request("stop", {"grace": 2.0})
        _wait_for(lambda: job.state == STOPPED and not sup.running, "the stop")
        _wait_for(lambda: not any(alive(p) for p in pids), "the job's processes to end")
    finally:
        try:
            job.close(2.0)
            journal.close()
        finally:
            if disk is not None:
                disk.close()


def test_no_hang_is_declared_while_the_journal_cannot_show_the_steps(
        tmp_path: Path, disk: TmpfsDisk | InjectedDisk) -> None:
    """While the journal cannot write, the trainers' records wait in their spool files
    and the agent sees no step: that silence is no hang (a restart would lose the steps
    since the last checkpoint to a full disk). Silence counts again once the journal has
    written for a while, and then a silent job is hung as before."""
    from agent.job.launch import LaunchSpec
    from agent.job.managed import JOURNAL_CATCH_UP, ManagedJob

    clock = [1_000.0]
    journal = Journal(disk.path, retry_every=0, clock=lambda: clock[0])
    spec = LaunchSpec({"name": "blind", "python": sys.executable, "script": "train.py",
                       "nproc_per_node": 1, "run_dir": str(tmp_path / "run"),
                       "hang": {"k": 3.0, "floor": 3.0}})
    job = ManagedJob(spec, journal, {}, log=lambda msg: None)
    job.detector.reset(clock[0])
    job.detector.observe(10, 0.01, clock[0])
    limit = job.detector.threshold()
    assert limit == 3.0
    disk.fill()
    while journal.fault is None:
        journal.append("host", {"cpu": 1.0})
    clock[0] += 60.0  # a minute without a step seen, the disk full throughout
    assert job.detector.hung(clock[0])  # what the detector alone would say
    assert job._judge_silence(clock[0]) is None
    assert not job.detector.hung(clock[0] + limit / 2)
    disk.free()
    clock[0] += 1.0
    journal.append("host", {"cpu": 1.0})  # the first write after the spell ends it
    assert journal.fault is None and journal.fault_ended_at == clock[0]
    ended = clock[0]
    clock[0] = ended + JOURNAL_CATCH_UP - 0.5  # the spooled steps are being read
    assert job._judge_silence(clock[0]) is None
    job.detector.observe(11, 0.01, clock[0])  # they are: the job trained on
    assert not job.detector.hung(clock[0] + limit - 0.1)
    assert job.detector.hung(clock[0] + limit)  # a silent job is hung again
    journal.close()
