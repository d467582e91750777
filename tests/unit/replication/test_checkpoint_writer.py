"""HighWatermarkCheckpoints: the checkpoint written through run_blocking, one write at a time,
never back to older offsets (replication/checkpoint_writer.py). A held run_blocking plays the
thread pool: each write runs when the test says, on a real file in tmp_path."""

from __future__ import annotations

import os
import threading

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from twisted_broker.replication import checkpoint_writer
from twisted_broker.replication.checkpoint_writer import HighWatermarkCheckpoints
from twisted_broker.storage.checkpoints import read_high_watermarks

A1, A2, A3 = {("a", 0): 1}, {("a", 0): 2}, {("a", 0): 3}


class HeldThreads:
    """run_blocking whose calls wait until ``run_next``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, function, *args) -> Deferred:
        done: Deferred = Deferred()
        self.calls.append((function, args, done))
        return done

    def run_next(self) -> None:
        function, args, done = self.calls.pop(0)
        maybeDeferred(function, *args).chainDeferred(done)


def test_inline_writes_each_change_once_and_nothing_when_idle(tmp_path, monkeypatch):
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    checkpoints = HighWatermarkCheckpoints(str(tmp_path))
    checkpoints.save({})
    assert fsyncs == []
    checkpoints.save(A1)
    assert read_high_watermarks(str(tmp_path)) == A1 and len(fsyncs) == 2  # the file's and its directory's
    checkpoints.save(dict(A1))
    assert len(fsyncs) == 2


def test_a_save_while_a_write_is_in_flight_waits_for_the_next_tick(tmp_path):
    threads = HeldThreads()
    checkpoints = HighWatermarkCheckpoints(str(tmp_path), threads)
    checkpoints.save(A1)
    checkpoints.save(A2)  # in flight: skipped
    assert len(threads.calls) == 1 and not os.path.exists(tmp_path / "replication-offset-checkpoint")
    threads.run_next()
    assert read_high_watermarks(str(tmp_path)) == A1 and checkpoints.saved == A1
    checkpoints.save(A2)
    threads.run_next()
    assert read_high_watermarks(str(tmp_path)) == A2


def test_the_stopping_write_is_inline_and_an_older_write_after_it_is_skipped(tmp_path):
    threads = HeldThreads()
    checkpoints = HighWatermarkCheckpoints(str(tmp_path), threads)
    checkpoints.save(A1)  # in flight, not started
    checkpoints.save(A3, at_once=True)
    assert read_high_watermarks(str(tmp_path)) == A3
    threads.run_next()  # the older write runs last: it must not take the file back
    assert read_high_watermarks(str(tmp_path)) == A3 and checkpoints.saved == A3


def test_a_failed_write_is_logged_and_tried_again(tmp_path, caplog):
    threads = HeldThreads()
    missing = tmp_path / "gone"
    checkpoints = HighWatermarkCheckpoints(str(missing), threads)
    checkpoints.save(A1)
    threads.run_next()  # the directory does not exist: OSError in the "thread"
    assert "writing the high watermark checkpoint failed" in caplog.text and checkpoints.saved == {}
    missing.mkdir()
    checkpoints.save(A1)
    threads.run_next()
    assert read_high_watermarks(str(missing)) == A1


def test_writes_run_on_a_thread_of_the_pool_not_the_callers(tmp_path, monkeypatch):
    writers = []
    real = checkpoint_writer.write_high_watermarks
    monkeypatch.setattr(checkpoint_writer, "write_high_watermarks",
                        lambda *args: (writers.append(threading.current_thread()), real(*args)))
    landed = threading.Event()

    class ImmediateReactor:  # deferToThreadPool answers through callFromThread
        def callFromThread(self, function, *args):
            function(*args)
            landed.set()

    pool = ThreadPool(1, 1)
    pool.start()
    try:
        checkpoints = HighWatermarkCheckpoints(
            str(tmp_path), lambda function, *args: deferToThreadPool(ImmediateReactor(), pool, function, *args))
        checkpoints.save(A1)
        assert landed.wait(10)
    finally:
        pool.stop()
    assert writers and writers[0] is not threading.current_thread()
    assert read_high_watermarks(str(tmp_path)) == A1
