"""The one thread that reads every SSH link's stream: each stream ends as a link's own
pump would end it (end of stream, silence, stop, a failing consumer), alone."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable

import pytest

from cockpit.transport.pump import PumpResult, StderrTail, StreamPump
from cockpit.transport.shared_reader import SharedReader


class PipeSource:
    """A stream source over two real pipes (stdout, stderr), as a channel is one."""

    def __init__(self, read_fds_from: int | None = None) -> None:
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        if read_fds_from is not None:  # as a big fleet's channels are numbered
            for name, number in (("out_r", read_fds_from), ("err_r", read_fds_from + 1)):
                os.dup2(getattr(self, name), number)
                os.close(getattr(self, name))
                setattr(self, name, number)
        for fd in (self.out_r, self.err_r):
            os.set_blocking(fd, False)
        self.closed = False

    def filenos(self) -> list[int]:
        return [self.out_r, self.err_r]

    def _read(self, fd: int) -> bytes | None:
        try:
            return os.read(fd, 1 << 16) or None
        except BlockingIOError:
            return None

    def read_out(self) -> bytes | None:
        return self._read(self.out_r)

    def read_err(self) -> bytes | None:
        return self._read(self.err_r)

    def finished(self) -> bool:
        return self.closed

    def exit_status(self) -> int | None:
        return 7

    def write(self, data: bytes) -> None:
        pass

    def send(self, out: bytes = b"", err: bytes = b"") -> None:
        if err:
            os.write(self.err_w, err)
        if out:
            os.write(self.out_w, out)

    def close(self) -> None:
        os.close(self.out_w)
        os.close(self.err_w)
        self.closed = True


class Run:
    """One link's call of `SharedReader.run`, on a thread of its own as a link's."""

    def __init__(self, reader: SharedReader, source: PipeSource, stale_after: float = 30.0,
                 deliver: Callable[[bytes], None] | None = None) -> None:
        self.chunks: list[bytes] = []
        self.threads: set[int] = set()
        self.stop = threading.Event()
        self.stderr = StderrTail()
        self.first = threading.Event()
        self.first_on: int | None = None  # the thread that saw the first data
        self.result: PumpResult | None = None
        self.error: BaseException | None = None

        def keep(chunk: bytes) -> None:
            self.threads.add(threading.get_ident())
            if deliver is not None:
                deliver(chunk)
            self.chunks.append(chunk)

        def first() -> None:
            self.first_on = threading.get_ident()
            self.first.set()

        def run() -> None:
            try:
                self.result = reader.run(StreamPump(source, keep, self.stderr, stale_after,
                                                    self.stop.is_set, first))
            except BaseException as exc:  # what the link's thread would see
                self.error = exc

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def joined(self, timeout: float = 10.0) -> Run:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"
        return self


def wait_until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def reader() -> SharedReader:
    return SharedReader(poll_interval=0.1)


def test_one_thread_reads_every_stream_in_whole_lines_until_each_ends(
        reader: SharedReader) -> None:
    sources = [PipeSource() for _ in range(3)]
    runs = [Run(reader, source) for source in sources]
    for i, source in enumerate(sources):
        source.send(b'{"seq":1,"from":%d}\n{"seq":2,' % i, err=b"warming up\n")
    for i, source in enumerate(sources):
        source.send(b'"from":%d}\n' % i)
    for i, run in enumerate(runs):
        wait_until(lambda run=run: b"".join(run.chunks).count(b"\n") == 2, f"stream {i}")
        # The link's own thread records that its stream is up (a store write): never
        # the reader's, which every other stream waits on.
        wait_until(run.first.is_set, f"stream {i}'s first data noted")
        assert run.first_on == run.thread.ident
        assert b"".join(run.chunks) == b'{"seq":1,"from":%d}\n{"seq":2,"from":%d}\n' % (i, i)
    sources[1].send(b"a partial line")
    sources[1].close()
    runs[1].joined()
    assert runs[1].result == PumpResult("eof", True, 7, len(b"a partial line"))
    assert runs[1].stderr.lines() == ["warming up"]
    # The others go on after one stream has ended.
    sources[0].send(b'{"seq":3}\n')
    wait_until(lambda: runs[0].chunks[-1] == b'{"seq":3}\n', "stream 0 after stream 1 ended")
    for source in (sources[0], sources[2]):
        source.close()
    for run in runs:
        run.joined()
    callers = {run.thread.ident for run in runs}
    readers = set().union(*(run.threads for run in runs))
    assert len(readers) == 1 and not readers & callers


def test_a_stop_and_silence_end_their_own_stream_only(reader: SharedReader) -> None:
    stopped, silent, busy = PipeSource(), PipeSource(), PipeSource()
    runs = {"stopped": Run(reader, stopped), "silent": Run(reader, silent, stale_after=0.5),
            "busy": Run(reader, busy, stale_after=0.5)}
    runs["stopped"].stop.set()
    assert runs["stopped"].joined().result == PumpResult("stopped", False, None, 0)
    deadline = time.monotonic() + 30  # bounds a hang only
    sent_for = time.monotonic() + 1.5
    # The busy stream keeps sending, and is never stale, until the silent one went stale
    # (after its 0.5 s) and for at least 1.5 s.
    while time.monotonic() < deadline and (runs["silent"].thread.is_alive()
                                           or time.monotonic() < sent_for):
        busy.send(b"tick\n")
        time.sleep(0.1)
    assert runs["silent"].joined(0).result == PumpResult("stale", False, None, 0)
    assert runs["busy"].thread.is_alive()
    busy.close()
    assert runs["busy"].joined().result.reason == "eof"  # type: ignore[union-attr]


def test_a_failing_consumer_ends_its_stream_with_its_error_on_the_links_thread(
        reader: SharedReader) -> None:
    def refuse(chunk: bytes) -> None:
        raise RuntimeError("the store is gone")

    bad, good = PipeSource(), PipeSource()
    failing, working = Run(reader, bad, deliver=refuse), Run(reader, good)
    bad.send(b"one\n")
    failing.joined()
    assert isinstance(failing.error, RuntimeError) and "store is gone" in str(failing.error)
    good.send(b"two\n")
    wait_until(lambda: working.chunks == [b"two\n"], "the other stream")
    good.close()
    assert working.joined().result == PumpResult("eof", True, 7, 0)


def test_streams_numbered_past_select_s_limit_are_read(reader: SharedReader) -> None:
    # A cockpit of a few hundred hosts holds more than 1024 descriptors, which select()
    # cannot wait on: the reader must still read those streams, and not spin.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2100:  # a usual login's 1024: raised for the test, as a cockpit may
        if hard != resource.RLIM_INFINITY and hard < 2100:
            pytest.skip(f"this process may not open descriptors past {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    try:
        _read_past_select_limit(reader)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _read_past_select_limit(reader: SharedReader) -> None:
    low, high = PipeSource(), PipeSource(read_fds_from=2050)
    runs = [Run(reader, low), Run(reader, high)]
    for source in (low, high):
        source.send(b"line\n")
    for run in runs:
        wait_until(lambda run=run: run.chunks == [b"line\n"], "both streams")
    # Quiet for a while: the reader waits (a round per poll interval of 0.1 s), where a
    # reader whose waits failed on such descriptors would go round thousands of times.
    before = reader.rounds
    time.sleep(0.5)
    assert reader.rounds - before < 50
    for source in (low, high):
        source.close()
    assert [run.joined().result for run in runs] == [PumpResult("eof", True, 7, 0)] * 2
    os.close(2050)
    os.close(2051)
