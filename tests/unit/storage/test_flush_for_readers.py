"""A reader waiting at the visible end gets its flush at once (flush_for_reader, watch_flush),
and the watchers a flush wakes are told whether they may answer there and then (at_once)."""

import os

from twisted_broker.storage.replica_log import ReplicaLog

ENTRY_BYTES = 12  # one message of b"ab"


def test_a_watcher_asks_for_the_flush_of_what_is_written_at_once(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=10_000, flush_interval_ms=1000, flusher=flusher)
    log.append(batch([b"ab"]))
    assert flusher.jobs == []  # the policy's count is far off: no flush yet
    log.watch_flush(lambda at_once: None)
    (job,) = flusher.jobs
    job.run()
    log.publish_flushed()
    assert log.end_offset == ENTRY_BYTES


def test_each_append_while_a_reader_waits_asks_for_a_flush(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=10_000, flusher=flusher)
    log.watch_flush(lambda at_once: None)
    assert flusher.jobs == []  # nothing written: nothing to flush
    log.append(batch([b"ab"]))
    (job,) = flusher.jobs
    log.append(batch([b"ab"]))  # the job not yet run takes it in (group commit): no second job
    job.run()
    log.publish_flushed()
    assert log.end_offset == 2 * ENTRY_BYTES
    log.append(batch([b"ab"]))  # nobody waits any more: the policy's count again
    assert len(flusher.jobs) == 1


def test_an_empty_read_at_the_end_asks_for_the_flush_through_flush_for_reader(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=10_000, flusher=flusher)
    log.append(batch([b"ab"]))
    assert log.read(0, 4096) is None
    log.flush_for_reader()
    assert len(flusher.jobs) == 1


def flushed_with_a_watcher(make_log, batch, flusher):
    """A log flushed after every message, a flush watcher, one append whose fsync has run
    (not yet reaped); returns the log and what the watcher was woken with."""
    log = make_log(flush_interval_messages=1, flusher=flusher)
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    flusher.jobs[0].run()
    return log, woken


def test_a_watcher_woken_where_the_broker_hears_of_the_flush_may_answer_at_once(make_log, batch, manual_flusher):
    log, woken = flushed_with_a_watcher(make_log, batch, manual_flusher)
    log.publish_flushed()  # the fsync process's reply, outside any other log call
    assert woken == [True]


def test_a_watcher_woken_inside_another_log_call_must_only_schedule(make_log, batch, manual_flusher):
    log, woken = flushed_with_a_watcher(make_log, batch, manual_flusher)
    assert log.read(0, 4096) is not None  # the read reaps the finished job, and wakes it
    assert woken == [False]
    log.publish_flushed()  # already published: nobody is woken twice
    assert woken == [False]


def test_an_inline_flush_wakes_watchers_inside_the_append(make_log, batch):
    log = make_log(flush_interval_messages=1)  # InlineFlusher
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    assert woken == [False]


def test_no_flush_for_readers_of_a_log_whose_appends_are_visible_at_once(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=10_000, flusher=flusher)
    log.visible_at_append = True
    woken = []
    log.watch_flush(woken.append)
    log.append(batch([b"ab"]))
    assert woken == [False] and flusher.jobs == []
    log.flush_for_reader()
    assert flusher.jobs == []


def test_no_flush_for_readers_of_a_replicas_log_they_wait_for_its_high_watermark(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=10_000, flusher=flusher, log_class=ReplicaLog)
    log.watch_flush(lambda at_once: None)
    log.append(batch([b"ab"]))
    log.flush_for_reader()
    assert flusher.jobs == []


def test_no_flush_for_readers_after_a_failed_fsync(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    job = flusher.jobs[0]
    job.error = OSError(5, "Input/output error")
    os.close(job.fd)
    job.finished.set()
    log.publish_flushed()
    assert log.write_error is not None
    log.flush_for_reader()  # what is past the durable size cannot be trusted: never published
    log.watch_flush(lambda at_once: None)
    assert len(flusher.jobs) == 1 and log.end_offset == 0
