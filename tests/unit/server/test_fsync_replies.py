"""The reactor's side of the fsync process (server/services.py FsyncReplies), with a real
fsync process and Twisted's memory reactor: replies are applied, and a process that dies and
cannot be started again at once is retried until it can."""

import os
import select
import signal
import time

from twisted.internet.testing import MemoryReactorClock

from twisted_broker.server.services import FSYNC_RESTART_RETRY_S, FsyncReplies
from twisted_broker.storage.process_flusher import ProcessFlusher


def readable(flusher, timeout_s=10.0):
    assert select.select([flusher.fileno()], [], [], timeout_s)[0], "the fsync process said nothing"


def test_replies_are_applied_and_a_failed_restart_is_retried(tmp_path):
    moved = []
    flusher = ProcessFlusher(on_flushed=moved.append)
    reactor = MemoryReactorClock()
    replies = FsyncReplies(flusher, reactor)
    replies.start()
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    try:
        assert replies in reactor.getReaders()
        written = os.write(fd, b"x" * 12)
        job = flusher.submit(fd, lambda: written, "log")
        readable(flusher)
        replies.doRead()
        assert moved == [job] and job.finished.is_set()

        real_restart, failures = flusher.restart, []

        def restart_failing_once():
            if not failures:
                failures.append(1)
                raise OSError(11, "Resource temporarily unavailable")
            real_restart()

        flusher.restart = restart_failing_once
        os.kill(flusher.pid, signal.SIGKILL)
        readable(flusher)  # the end of the socket
        replies.doRead()
        assert failures and replies not in reactor.getReaders()
        reactor.advance(FSYNC_RESTART_RETRY_S)  # the retry starts a new process
        assert replies in reactor.getReaders()

        written += os.write(fd, b"y" * 12)
        second = flusher.submit(fd, lambda: written, "log")
        readable(flusher)
        replies.doRead()
        assert second.finished.is_set() and second.size == 24
    finally:
        replies.stop()
        flusher.close()
        os.close(fd)
    assert replies not in reactor.getReaders() and not reactor.getDelayedCalls()


def test_stop_cancels_a_pending_retry(tmp_path):
    flusher = ProcessFlusher()
    reactor = MemoryReactorClock()
    replies = FsyncReplies(flusher, reactor)
    replies.start()

    def restart_failing():
        raise OSError(24, "Too many open files")

    flusher.restart = restart_failing
    os.kill(flusher.pid, signal.SIGKILL)
    readable(flusher)
    replies.doRead()
    assert len(reactor.getDelayedCalls()) == 1
    replies.stop()
    assert not reactor.getDelayedCalls()
    flusher.close()


def test_a_stalled_socket_is_watched_for_writing_until_the_backlog_is_sent(tmp_path):
    flusher = ProcessFlusher()
    reactor = MemoryReactorClock()
    replies = FsyncReplies(flusher, reactor)
    replies.start()
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    written = os.write(fd, b"x" * 12)
    os.kill(flusher.pid, signal.SIGSTOP)
    try:
        while not flusher.stalled:  # OPEN and CLOSE records, which bring no reply
            flusher.submit(fd, lambda: written).wait()
        assert replies in reactor.getWriters()
        job = flusher.submit(fd, lambda: written)  # held back
    finally:
        os.kill(flusher.pid, signal.SIGCONT)
    try:
        assert select.select([], [flusher.fileno()], [], 10)[1], "no room in the socket"
        replies.doWrite()
        assert replies not in reactor.getWriters() and not flusher.stalled
        deadline = time.monotonic() + 10
        while not job.finished.is_set() and time.monotonic() < deadline:  # its reply may come in pieces
            readable(flusher, max(deadline - time.monotonic(), 0))
            replies.doRead()
        assert job.finished.is_set() and job.size == written
    finally:
        replies.stop()
        flusher.close()
        os.close(fd)
