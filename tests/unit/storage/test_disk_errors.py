"""Disk errors: a failed write leaves no half batch; a failed fsync makes that one log refuse writes."""

import errno
import os

import pytest

from twisted_broker.errors import LogWriteError
from twisted_broker.storage import segment as segment_module
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import CLEAN_SHUTDOWN_MARKER
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # 12 bytes


class FailingOs:
    """Stands in for ``os`` inside segment.py: the real module, except for what a test replaces."""

    def __init__(self, **replaced) -> None:
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(os, name)


class DiskFullAfter:
    """os.write that writes ``budget`` bytes, then fails with ENOSPC (a disk that filled up)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def __call__(self, fd, data):
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = os.write(fd, bytes(data[:self.budget]))
        self.budget -= written
        return written


def fail(error_number):
    def failing(*args):
        raise OSError(error_number, os.strerror(error_number))
    return failing


def file_bytes(log):
    with open(log.segments[-1].path, "rb") as file:
        return file.read()


def test_a_failed_write_is_cut_back_and_later_appends_work(make_log, batch, read_all, monkeypatch):
    log = make_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    monkeypatch.setattr(segment_module, "os", FailingOs(write=DiskFullAfter(15)))
    with pytest.raises(LogWriteError) as raised:
        log.append(batch([b"cd", b"ef"]))  # 24 bytes; 15 reach the file
    assert raised.value.errno == errno.ENOSPC
    assert file_bytes(log) == ENTRY
    assert log.segments[-1].size == 12
    assert log.write_error is None

    monkeypatch.undo()
    assert log.append(batch([b"gh"])) == 12
    assert read_all(log, 1000) == [(0, b"ab"), (12, b"gh")]


def test_a_failed_write_that_cannot_be_cut_back_makes_the_log_refuse_writes(make_log, batch, monkeypatch):
    log = make_log(flush_interval_messages=1)
    monkeypatch.setattr(segment_module, "os", FailingOs(write=DiskFullAfter(5), ftruncate=fail(errno.EIO)))
    with pytest.raises(LogWriteError):
        log.append(batch([b"ab"]))
    monkeypatch.undo()
    assert log.write_error is not None
    with pytest.raises(LogWriteError):
        log.append(batch([b"ab"]))


def test_a_failed_fsync_makes_the_log_refuse_writes(make_log, batch, read_all, monkeypatch):
    log = make_log(flush_interval_messages=1000)
    log.append(batch([b"ab"]))
    log.flush()
    log.append(batch([b"cd"]))
    # Patched in os itself: the fsync runs wherever the flusher runs it.
    monkeypatch.setattr(os, "fdatasync", fail(errno.EIO))
    with pytest.raises(LogWriteError) as raised:
        log.flush()
    assert raised.value.errno == errno.EIO
    monkeypatch.undo()

    assert log.write_error is not None
    with pytest.raises(LogWriteError):
        log.append(batch([b"ef"]))
    assert file_bytes(log) == ENTRY + encode_message_set([b"cd"])  # nothing more was written
    assert read_all(log, 1000) == [(0, b"ab")]  # what was flushed before stays readable


def test_a_failed_fsync_stops_only_its_own_log(make_manager, batch, log_dir, clock, monkeypatch):
    manager = make_manager(policy_for=lambda topic: LogPolicy(flush_interval_messages=1000))
    bad, good = manager.get_or_create_log("bad", 0), manager.get_or_create_log("good", 0)
    bad.append(batch([b"ab"]))
    monkeypatch.setattr(os, "fdatasync", fail(errno.EIO))
    with pytest.raises(LogWriteError):
        bad.flush()
    monkeypatch.undo()

    good.append(batch([b"ab"]))
    good.flush()
    assert good.offsets_before(-1, 1) == [12]
    clock.advance(3600)
    assert manager.flush_due() == 0  # the broken log is skipped: its unflushed bytes stay unpublished
    assert bad.offsets_before(-1, 1) == [0]
    manager.close()
    assert not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))  # next start recovers
