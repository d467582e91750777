"""A flusher whose fsyncs run in a process of their own (fsync_worker.py): no GIL to share.

The broker's reactor thread does everything here: a job's requests are small records sent on
a non-blocking socket, and the replies are read when the socket is readable (the broker
registers ``fileno()`` with its reactor and calls ``read_replies()``, and ``send_backlog()``
when the socket is writable while ``stalled``; without a reactor, ``poll()``). A job ends
when the fsync process has made all it was asked for durable, or when the log waits for it
(``wait()``: a roll, a close), which fsyncs on the caller's thread at once rather than wait
for a reply the caller itself would have to read.

If the fsync process dies, it is started again and the unfinished jobs are sent to it anew:
a flush is late, never lost.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from twisted_broker.storage import fsync_worker
from twisted_broker.storage.flusher import RoundFigures, timed_fdatasync
from twisted_broker.storage.fsync_worker import CLOSE, MORE, OPEN, REPLY, REQUEST

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0  # for the fsync process to exit once the broker closes its socket
MAX_JOB_ID = 0xFFFFFFFF
# Ended jobs whose CLOSE waits for the next request (``end``), at most: the fsync process
# keeps their descriptors meanwhile (and the broker's flush timer sends them, ``send_closes``).
MAX_DEFERRED_CLOSES = 64


class RemoteFlushJob(RoundFigures):
    """A FlushJob (flusher.py) whose rounds run in the fsync process; the same attributes."""

    __slots__ = ("id", "fd", "_written", "_flusher", "requested", "sent", "size", "error", "finished",
                 "rounds", "seconds", "seconds_max", "counted_rounds", "counted_seconds", "log")

    def __init__(self, flusher: ProcessFlusher, job_id: int, fd: int, written: Callable[[], int],
                 owner: object) -> None:
        self.id = job_id
        self.fd = os.dup(fd)  # as FlushJob's: safe from the segment's own close
        self._written = written
        self._flusher = flusher
        self.requested = written()  # the size asked for so far (a message boundary)
        self.sent = -1  # the size the fsync process was last told (-1: not opened there yet)
        self.size = 0
        self.error: OSError | None = None
        self.finished = threading.Event()
        self.rounds, self.seconds, self.seconds_max = 0, 0.0, 0.0
        self.counted_rounds, self.counted_seconds = 0, 0.0
        self.log = owner

    def request_more(self) -> bool:
        """Ask for the bytes written since; False once the job has ended (submit a new one)."""
        if self.finished.is_set():
            return False
        size = self._written()
        if size > self.requested:
            self.requested = size
            self._flusher.send_wanted(self)
        return True

    def wait(self) -> None:
        """fsync all that is written, here and now, and end the job."""
        if self.finished.is_set():
            return
        size = self._written()
        try:
            seconds = timed_fdatasync(self.fd)
        except OSError as exc:
            self.error = exc
        else:
            self.count_round(seconds)
            self.size = max(self.size, size)
        self._flusher.end(self)


class ProcessFlusher:
    """Runs flush jobs in the fsync process. Used from one thread (the reactor's)."""

    def __init__(self, on_flushed: Callable[[RemoteFlushJob], object] | None = None) -> None:
        # on_flushed(job) after each reply that moved a job (the broker publishes the log).
        self._on_flushed = on_flushed
        self._jobs: dict[int, RemoteFlushJob] = {}
        self._last_id = 0
        self._stalled = False  # a request found the socket full: resend what is missing
        self._unsent_closes: list[int] = []
        self._deferred_closes: list[int] = []  # ended jobs, told with the next request
        self.on_stalled: Callable[[], object] | None = None  # called when a request finds the socket full
        self._process: subprocess.Popen | None = None
        self._channel: socket.socket | None = None
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # -I -S: the worker needs only the standard library, and starts in milliseconds.
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", fsync_worker.__file__, str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._channel = ours
        for job in self._jobs.values():  # after a restart: the new process knows none of them
            job.sent = -1
            self.send_wanted(job)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def fileno(self) -> int:
        """The socket the replies arrive on (it changes when the process is restarted)."""
        return self._channel.fileno()

    def submit(self, fd: int, written: Callable[[], int], owner: object = None) -> RemoteFlushJob:
        self._last_id = self._last_id % MAX_JOB_ID + 1
        job = RemoteFlushJob(self, self._last_id, fd, written, owner)
        self._jobs[job.id] = job
        self.send_wanted(job)
        return job

    def send_wanted(self, job: RemoteFlushJob) -> None:
        """Tell the fsync process the size ``job`` wants durable (opening the job there first)."""
        if self._stalled:
            return  # send_backlog sends it once there is room
        try:
            if job.sent < 0:
                socket.send_fds(self._channel, [REQUEST.pack(OPEN, job.id, job.requested)], [job.fd])
            else:
                self._channel.send(REQUEST.pack(MORE, job.id, job.requested))
        except BlockingIOError:
            # Hundreds of requests wait behind a long fsync: send_backlog sends what is still
            # wanted once the socket has room (or a reply has come).
            self._stall()
            return
        except OSError as exc:
            # The process is gone; read_replies sees the end of the socket and restarts it.
            log.debug("fsync process: cannot send: %s", exc)
            return
        job.sent = job.requested
        if self._deferred_closes:
            self.send_closes()

    def end(self, job: RemoteFlushJob) -> None:
        """Finish ``job`` (its fsyncs are done or failed) and forget it here and there."""
        if self._jobs.pop(job.id, None) is None:
            return
        if job.sent >= 0:
            # Told after the next request, not now: the fsync process, woken by that one,
            # reads it without a wake of its own (one per flush less on both sides).
            self._deferred_closes.append(job.id)
            if len(self._deferred_closes) >= MAX_DEFERRED_CLOSES:
                self.send_closes()
        os.close(job.fd)
        job.finished.set()

    def send_closes(self) -> None:
        """Tell the fsync process of the jobs that ended since the last request (the broker's
        flush timer calls it too, so that it drops their descriptors when no request comes)."""
        closes, self._deferred_closes = self._deferred_closes, []
        for job_id in closes:
            self._send_close(job_id)

    def _send_close(self, job_id: int) -> None:
        if not self._stalled:
            try:
                self._channel.send(REQUEST.pack(CLOSE, job_id, 0))
                return
            except BlockingIOError:
                self._stall()
            except OSError:
                return  # the process is gone, and its descriptors with it
        self._unsent_closes.append(job_id)

    def _stall(self) -> None:
        if not self._stalled:
            self._stalled = True
            if self.on_stalled is not None:
                self.on_stalled()

    @property
    def stalled(self) -> bool:
        """True while requests wait for room in the socket (``send_backlog`` once writable)."""
        return self._stalled

    def send_backlog(self) -> bool:
        """Send what a full socket held back; True when nothing is left waiting.

        The broker calls it when the socket is writable again, and read_replies after every
        reply: a socket full of CLOSE records alone would bring no reply.
        """
        self._stalled = False
        closes, self._unsent_closes = self._unsent_closes, []
        for job_id in closes:
            self._send_close(job_id)
        for job in list(self._jobs.values()):
            if job.sent < job.requested:
                self.send_wanted(job)
        self.send_closes()
        return not self._stalled

    def read_replies(self) -> bool:
        """Apply the replies waiting; call ``on_flushed`` for each job they moved.

        Returns False when the fsync process has gone: the caller restarts it (``restart()``)
        once the old socket is no longer watched.
        """
        moved: dict[int, RemoteFlushJob] = {}
        alive = True
        while True:
            try:
                data = self._channel.recv(REPLY.size)
            except BlockingIOError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                alive = False
                break
            job_id, size, errno, seconds = REPLY.unpack(data)
            job = self._jobs.get(job_id)
            if job is None:
                continue  # a job the log flushed itself (wait()), or one ended before a restart
            moved[job_id] = job
            if errno:
                job.error = OSError(errno, os.strerror(errno))
                self.end(job)
            else:
                job.count_round(seconds)
                job.size = max(job.size, size)
                if job.size >= job.requested:
                    self.end(job)
        if self._stalled and alive:
            self.send_backlog()
        if self._on_flushed is not None:
            for job in moved.values():
                self._on_flushed(job)
        return alive

    def restart(self) -> None:
        """Start a new fsync process after the last one has gone, and hand it the open jobs."""
        status = self._process.wait() if self._process is not None else None
        log.error("the fsync process exited (status %s); starting a new one with %d open flushes",
                  status, len(self._jobs))
        self._channel.close()
        self._stalled = False
        self._unsent_closes, self._deferred_closes = [], []  # the new process holds no descriptor of an ended job
        self._start()

    def poll(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` for replies or, while stalled, room to send, and act on
        them (for use without a reactor)."""
        readable, writable, _ = select.select([self._channel], [self._channel] if self._stalled else [], [],
                                              timeout)
        if writable:
            self.send_backlog()
        if readable and not self.read_replies():
            self.restart()

    def close(self) -> None:
        """fsync what the open jobs still want, here, and stop the fsync process."""
        for job in list(self._jobs.values()):
            job.wait()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.error("the fsync process did not exit in %.0f s; killing it", STOP_TIMEOUT_S)
                self._process.kill()
                self._process.wait()
            self._process = None
