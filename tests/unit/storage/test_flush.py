"""Flush policy: appended bytes are visible to reads and offsets only once flushed (spec 4.6)."""

import os
import threading

from twisted_broker.storage.flusher import ThreadFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import (
    encode_compressed_message_set, encode_message_set, validate_message_set,
)

ENTRY = encode_message_set([b"ab"])  # 12 bytes


def read_bytes(log, offset, max_size=10_000):
    region = log.read(offset, max_size)
    if region is None:
        return None
    with region:
        return region.read()


def test_messages_become_visible_when_the_nth_message_is_appended(make_log, batch):
    log = make_log(flush_interval_messages=3)
    log.append(batch([b"ab"]))
    log.append(batch([b"ab"]))
    assert read_bytes(log, 0) is None  # 0 is still the end
    assert log.offsets_before(-1, 1) == [0]
    assert log.end_offset == 0
    log.append(batch([b"ab"]))
    assert read_bytes(log, 0) == ENTRY * 3
    assert log.offsets_before(-1, 1) == [36]
    assert log.end_offset == 36


def test_the_flush_count_includes_the_inner_messages_of_a_wrapper(make_log):
    log = make_log(flush_interval_messages=3)
    wrapper = encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
    log.append(validate_message_set(wrapper))
    assert read_bytes(log, 0) == wrapper


def test_the_count_starts_again_after_each_flush(make_log, batch):
    log = make_log(flush_interval_messages=2)
    for _ in range(3):
        log.append(batch([b"ab"]))
    assert log.offsets_before(-1, 1) == [24]
    log.append(batch([b"ab"]))
    assert log.offsets_before(-1, 1) == [48]


def test_flush_if_due_waits_for_flush_interval_ms_since_the_last_flush(make_log, batch, clock):
    log = make_log(flush_interval_messages=1000, flush_interval_ms=3000)
    log.append(batch([b"ab"]))
    clock.advance(2.999)
    assert log.flush_if_due() is False
    assert read_bytes(log, 0) is None
    clock.advance(0.001)
    assert log.flush_if_due() is True
    assert read_bytes(log, 0) == ENTRY

    log.append(batch([b"ab"]))
    clock.advance(2)  # 2 s since the flush above, although 5 s since the log was opened
    assert log.flush_if_due() is False
    assert log.offsets_before(-1, 1) == [12]


def test_flush_if_due_does_nothing_without_unflushed_data(make_log, batch, clock):
    log = make_log(flush_interval_messages=1, flush_interval_ms=3000)
    log.append(batch([b"ab"]))
    clock.advance(3600)
    assert log.flush_if_due() is False


def test_log_manager_flush_due_flushes_only_the_logs_that_are_due(make_manager, batch, clock):
    policies = {"slow": LogPolicy(flush_interval_messages=1000, flush_interval_ms=10_000),
                "fast": LogPolicy(flush_interval_messages=1000, flush_interval_ms=1000)}
    manager = make_manager(policy_for=policies.__getitem__)
    slow, fast = manager.get_or_create_log("slow", 0), manager.get_or_create_log("fast", 0)
    slow.append(batch([b"ab"]))
    fast.append(batch([b"ab"]))
    clock.advance(1)
    assert manager.flush_due() == 1
    assert (slow.offsets_before(-1, 1), fast.offsets_before(-1, 1)) == ([0], [12])
    clock.advance(9)
    assert manager.flush_due() == 1
    assert slow.offsets_before(-1, 1) == [12]


def test_offsets_latest_counts_only_flushed_data(make_log, batch):
    log = make_log(flush_interval_messages=1000)
    log.append(batch([b"ab"]))
    log.flush()
    log.append(batch([b"ab", b"ab"]))
    assert log.offsets_before(-1, 10) == [12, 0]


def test_a_roll_flushes_the_segment_it_leaves(make_log, batch):
    log = make_log(file_size=20, flush_interval_messages=1000)
    log.append(batch([b"ab"]))
    log.append(batch([b"ab"]))
    assert read_bytes(log, 0) is None
    log.append(batch([b"ab"]))  # 24 > 20: rolls first
    assert [(s.start, s.size, s.flushed_size) for s in log.segments] == [(0, 24, 24), (24, 12, 0)]
    assert read_bytes(log, 0) == ENTRY * 2
    assert read_bytes(log, 24) is None
    assert log.offsets_before(-1, 10) == [24, 0]


def test_a_flush_becomes_visible_only_when_its_fsync_has_finished(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    (job,) = flusher.jobs
    assert read_bytes(log, 0) is None
    assert log.offsets_before(-1, 1) == [0]
    job.run()
    assert read_bytes(log, 0) == ENTRY  # a read publishes what the flusher finished
    assert log.offsets_before(-1, 1) == [12]


def test_flushes_asked_for_before_the_fsync_starts_share_it(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    for _ in range(10):
        log.append(batch([b"ab"]))
    (job,) = flusher.jobs  # ten flushes asked for, one job: it covers what is written when it runs
    job.run()
    log.publish_flushed()
    assert read_bytes(log, 0) == ENTRY * 10
    assert (job.rounds, log.flush_count) == (1, 1)


def fsync_hook(monkeypatch, during):
    """Have ``during(n)`` run inside the n-th fdatasync (from 1): what the reactor does meanwhile."""
    real, calls = os.fdatasync, []

    def fdatasync(fd):
        calls.append(fd)
        during(len(calls))
        real(fd)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


def test_a_flush_asked_for_during_an_fsync_is_the_same_jobs_next_round(make_log, batch, monkeypatch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    seen = []

    def during(round_number):
        seen.append(read_bytes(log, 0))
        if round_number == 1:
            for _ in range(3):
                log.append(batch([b"ab"]))  # each asks the running job for more
    calls = fsync_hook(monkeypatch, during)
    (job,) = flusher.jobs
    job.run(on_round=lambda finished: finished.log.publish_flushed())  # as the broker's reactor does
    assert len(calls) == job.rounds == 2
    assert len(flusher.jobs) == 1  # no second job: the flusher went on without the reactor
    # Round 2 ran with round 1's bytes already published, and only those.
    assert seen == [None, ENTRY]
    assert read_bytes(log, 0) == ENTRY * 4
    assert log.flush_count == 2


def test_a_round_with_nothing_new_is_skipped(make_log, batch, monkeypatch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    (job,) = flusher.jobs
    calls = fsync_hook(monkeypatch, lambda n: job.request_more())  # asked, but nothing written
    job.run()
    assert len(calls) == job.rounds == 1
    assert read_bytes(log, 0) == ENTRY


def test_a_flush_asked_for_after_the_job_ended_is_a_new_job(make_log, batch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    flusher.jobs[0].run()
    assert flusher.jobs[0].request_more() is False
    log.append(batch([b"ab"]))
    assert len(flusher.jobs) == 2
    flusher.jobs[1].run()
    assert read_bytes(log, 0) == ENTRY * 2


def test_the_flush_timer_asks_the_running_job_for_more(make_log, batch, clock, monkeypatch, manual_flusher):
    flusher = manual_flusher
    log = make_log(flush_interval_messages=1000, flush_interval_ms=1000, flusher=flusher)
    log.append(batch([b"ab"]))
    clock.advance(1)
    assert log.flush_if_due() is True
    (job,) = flusher.jobs

    def during(round_number):
        if round_number == 1:
            log.append(batch([b"ab"]))
            clock.advance(1)
            assert log.flush_if_due() is True
    fsync_hook(monkeypatch, during)
    job.run()
    assert len(flusher.jobs) == 1 and job.rounds == 2
    assert read_bytes(log, 0) == ENTRY * 2


def test_appends_racing_a_flusher_thread_all_become_visible_in_order(make_log, batch):
    published = []
    flusher = ThreadFlusher(on_flushed=lambda job: published.append(job.size))
    log = make_log(flush_interval_messages=1, flusher=flusher)
    try:
        for _ in range(2000):
            log.append(batch([b"ab"]))
            log.publish_flushed()
        log.flush()
    finally:
        flusher.close()
    assert read_bytes(log, 0, 100_000) == ENTRY * 2000
    assert published == sorted(published) and published[-1] == 12 * 2000
    assert all(size % 12 == 0 for size in published)  # every durable size is a message boundary
    assert log.flush_count < 2000  # rounds were shared


def test_the_log_manager_hands_its_flusher_to_every_log(make_manager, batch, manual_flusher):
    flusher = manual_flusher
    manager = make_manager(flusher=flusher, policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    manager.get_or_create_log("t", 0).append(batch([b"ab"]))
    assert len(flusher.jobs) == 1
    flusher.jobs[0].run()  # closes the job's descriptor


def test_a_failing_callback_does_not_stop_the_flusher_thread(make_log, batch, caplog):
    calls = []

    def on_flushed(job):
        calls.append(job)
        if len(calls) == 1:
            raise RuntimeError("a bug in the callback")
    flusher = ThreadFlusher(on_flushed=on_flushed)
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    log.flush()
    log.append(batch([b"ab"]))
    waiter = threading.Thread(target=log.flush, daemon=True)  # waits forever if the thread died
    waiter.start()
    waiter.join(10)
    assert not waiter.is_alive()
    flusher.close()
    assert read_bytes(log, 0) == ENTRY * 2
    assert "a bug in the callback" in caplog.text
