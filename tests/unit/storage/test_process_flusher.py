"""The fsync process (storage/fsync_worker.py) and the flusher that drives it, with a real
child process: durability, group commit, a failed fsync, a full socket, a killed process."""

import os
import signal
import socket
import threading
import time

import pytest

from twisted_broker.storage import fsync_worker
from twisted_broker.storage.fsync_worker import MORE, OPEN, REPLY, REQUEST
from twisted_broker.storage.process_flusher import ProcessFlusher
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # 12 bytes


def poll_until(flusher, predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the fsync process did not answer in time"
        flusher.poll(0.05)


@pytest.fixture
def flusher():
    moved = []
    flusher = ProcessFlusher(on_flushed=moved.append)
    flusher.moved = moved
    yield flusher
    flusher.close()


@pytest.fixture
def data_file(tmp_path):
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    yield fd
    os.close(fd)


def process_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "Z"  # exited, not yet reaped


def test_a_job_ends_once_the_process_has_fsynced_all_it_was_asked_for(flusher, data_file):
    written = os.write(data_file, ENTRY * 3)
    job = flusher.submit(data_file, lambda: written, owner="the log")
    assert not job.finished.is_set()  # nothing is durable before the reply is read
    poll_until(flusher, job.finished.is_set)
    assert (job.size, job.error, job.log) == (written, None, "the log")
    assert job.rounds >= 1 and job.seconds > 0
    assert flusher.moved == [job]
    assert job.request_more() is False  # ended: the log must submit a new job


def test_more_asked_for_while_a_job_is_open_is_made_durable_by_the_same_job(flusher, data_file):
    sizes = [os.write(data_file, ENTRY)]
    job = flusher.submit(data_file, lambda: sizes[-1])
    for _ in range(20):
        sizes.append(sizes[-1] + os.write(data_file, ENTRY))
        assert job.request_more() is True
    poll_until(flusher, job.finished.is_set)
    assert job.size == sizes[-1] == 21 * len(ENTRY)
    assert 1 <= job.rounds <= 21


def test_a_round_covers_every_request_waiting_when_it_starts(tmp_path):
    """The worker reads all waiting requests before it fsyncs: one round, the largest size."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    socket.send_fds(ours, [REQUEST.pack(OPEN, 7, 12)], [fd])
    for size in (24, 36, 48):
        ours.send(REQUEST.pack(MORE, 7, size))
    worker = threading.Thread(target=fsync_worker.serve, args=(theirs,), daemon=True)
    worker.start()
    ours.settimeout(10)
    job_id, size, errno, _seconds = REPLY.unpack(ours.recv(REPLY.size))
    assert (job_id, size, errno) == (7, 48, 0)
    ours.settimeout(0.3)
    with pytest.raises(TimeoutError):
        ours.recv(REPLY.size)  # no second round: nothing more was asked for
    ours.close()  # the worker returns at the end of its socket
    worker.join(10)
    assert not worker.is_alive()
    os.close(fd)


def test_a_failed_fsync_ends_the_job_with_its_error(flusher):
    read_end, write_end = os.pipe()  # fdatasync on a pipe fails with EINVAL
    try:
        job = flusher.submit(write_end, lambda: 10)
        poll_until(flusher, job.finished.is_set)
        assert isinstance(job.error, OSError) and job.error.errno == 22
        assert job.size == 0  # nothing was made durable
    finally:
        os.close(read_end)
        os.close(write_end)


def test_wait_fsyncs_on_the_callers_thread_without_a_reply(flusher, data_file):
    written = os.write(data_file, ENTRY)
    os.kill(flusher.pid, signal.SIGSTOP)  # the process can answer nothing
    try:
        job = flusher.submit(data_file, lambda: written)
        job.wait()
        assert job.finished.is_set() and job.size == written
    finally:
        os.kill(flusher.pid, signal.SIGCONT)
    flusher.poll(0.2)  # its late reply, if any, is for a job that has ended: ignored
    assert job.size == written


def test_requests_that_find_the_socket_full_are_sent_once_the_process_answers(flusher, data_file):
    os.kill(flusher.pid, signal.SIGSTOP)
    try:
        size = [os.write(data_file, ENTRY)]
        job = flusher.submit(data_file, lambda: size[0])
        for _ in range(5000):  # far more records than the socket holds
            size[0] += os.write(data_file, ENTRY)
            job.request_more()
        assert flusher._stalled  # some requests could not be sent
    finally:
        os.kill(flusher.pid, signal.SIGCONT)
    poll_until(flusher, job.finished.is_set, timeout_s=30)
    assert job.size == size[0] == 5001 * len(ENTRY)


def test_requests_held_back_behind_records_that_bring_no_reply_are_sent_once_there_is_room(flusher, data_file):
    written = os.write(data_file, ENTRY)
    stalled = []
    flusher.on_stalled = lambda: stalled.append(True)
    os.kill(flusher.pid, signal.SIGSTOP)
    try:
        while not flusher.stalled:  # jobs the log flushes itself: an OPEN and a CLOSE each
            flusher.submit(data_file, lambda: written).wait()
        assert stalled == [True]
        job = flusher.submit(data_file, lambda: written)  # held back: the socket is full
    finally:
        os.kill(flusher.pid, signal.SIGCONT)
    # The process reads the OPENs and CLOSEs and has nothing to answer: only room in the
    # socket lets the held-back request out.
    poll_until(flusher, job.finished.is_set)
    assert job.size == written and not flusher.stalled


def test_a_killed_fsync_process_is_replaced_and_the_open_jobs_finish(flusher, data_file):
    first = flusher.pid
    os.kill(first, signal.SIGSTOP)
    written = os.write(data_file, ENTRY * 2)
    job = flusher.submit(data_file, lambda: written)
    os.kill(first, signal.SIGKILL)
    poll_until(flusher, job.finished.is_set)
    assert flusher.pid != first and process_gone(first)
    assert (job.size, job.error) == (written, None)
    # The new process serves new jobs too.
    more = written + os.write(data_file, ENTRY)
    second = flusher.submit(data_file, lambda: more)
    poll_until(flusher, second.finished.is_set)
    assert second.size == more


def test_close_fsyncs_the_open_jobs_and_the_process_exits(data_file):
    flusher = ProcessFlusher()
    pid = flusher.pid
    os.kill(pid, signal.SIGSTOP)
    written = os.write(data_file, ENTRY)
    job = flusher.submit(data_file, lambda: written)
    os.kill(pid, signal.SIGCONT)
    flusher.close()
    assert job.finished.is_set() and job.size == written
    assert process_gone(pid)


def test_a_log_publishes_what_the_process_made_durable(make_log, batch, flusher):
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    assert log.end_offset == 0  # fsync asked for, not yet reported
    flusher.moved.clear()
    poll_until(flusher, lambda: flusher.moved)
    log.publish_flushed()
    assert log.end_offset == len(ENTRY)
    log.append(batch([b"cd"]))
    log.flush()  # waits without the reactor: the fsync runs here
    assert log.end_offset == 2 * len(ENTRY)


def test_a_failed_fsync_in_the_process_makes_the_log_refuse_writes(make_log, batch, flusher, monkeypatch):
    log = make_log(flush_interval_messages=1, flusher=flusher)
    segment = log.segments[-1]
    read_end, write_end = os.pipe()
    monkeypatch.setattr(segment, "fileno", lambda: write_end)  # the process fsyncs a pipe: EINVAL
    try:
        log.append(batch([b"ab"]))
        poll_until(flusher, lambda: flusher.moved)
        log.publish_flushed()
        assert log.write_error is not None and "fsync failed" in str(log.write_error)
        assert log.end_offset == 0
    finally:
        os.close(read_end)
        os.close(write_end)


def descriptors_of(pid, path):
    """How many descriptors of process ``pid`` name the file ``path``."""
    names = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass  # closed meanwhile
    return names.count(str(path))


def poll_descriptors(flusher, path, count, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while descriptors_of(flusher.pid, path) != count:
        assert time.monotonic() < deadline, f"the fsync process holds {descriptors_of(flusher.pid, path)}, not {count}"
        flusher.poll(0.01)


def test_an_ended_job_is_closed_in_the_process_with_the_next_request_not_by_a_wake_of_its_own(flusher, tmp_path):
    path = tmp_path / "segment"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        written = os.write(fd, ENTRY)
        first = flusher.submit(fd, lambda: written)
        poll_until(flusher, first.finished.is_set)
        time.sleep(0.1)
        assert descriptors_of(flusher.pid, path) == 1  # its CLOSE waits for the next request
        more = written + os.write(fd, ENTRY)
        second = flusher.submit(fd, lambda: more)  # its OPEN, then the first's CLOSE
        poll_until(flusher, second.finished.is_set)
        assert second.size == more
        poll_descriptors(flusher, path, 1)  # the second's, until the flush timer's send_closes
        flusher.send_closes()
        poll_descriptors(flusher, path, 0)
    finally:
        os.close(fd)
