"""Flush policy: appended bytes are visible to reads and offsets only once flushed (spec 4.6)."""

from twisted_broker.storage.log import LogPolicy
from twisted_broker.wire.compression import GZIP
from twisted_broker.wire.message_set import (
    encode_compressed_message_set, encode_message_set, validate_message_set,
)

ENTRY = encode_message_set([b"ab"])  # 12 bytes


class ManualFlusher:
    """A flusher whose jobs run only when the test runs them: a background thread, by hand."""

    def __init__(self) -> None:
        self.jobs = []

    def submit(self, job) -> None:
        self.jobs.append(job)

    def close(self) -> None:
        pass


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


def test_a_flush_becomes_visible_only_when_its_fsync_has_finished(make_log, batch, clock):
    flusher = ManualFlusher()
    log = make_log(flush_interval_messages=1, flusher=flusher)
    log.append(batch([b"ab"]))
    log.append(batch([b"ab"]))
    (first,) = flusher.jobs  # one fsync in flight: the second append's flush waits for it
    assert read_bytes(log, 0) is None
    clock.advance(3600)
    assert log.flush_if_due() is False  # one is still running: no new job
    first.run()
    assert read_bytes(log, 0) == ENTRY  # published: only what that fsync covered
    first_job, second = flusher.jobs  # and the flush asked for meanwhile has started (group commit)
    assert read_bytes(log, 12) is None
    second.run()
    log.publish_flushed()
    assert read_bytes(log, 0) == ENTRY * 2
    assert len(flusher.jobs) == 2


def test_flushes_asked_for_during_an_fsync_share_the_next_one(make_log, batch):
    flusher = ManualFlusher()
    log = make_log(flush_interval_messages=1, flusher=flusher)
    for _ in range(10):
        log.append(batch([b"ab"]))
    assert len(flusher.jobs) == 1
    flusher.jobs[0].run()
    log.publish_flushed()
    assert len(flusher.jobs) == 2  # nine flushes asked for meanwhile: one fsync
    flusher.jobs[1].run()
    log.publish_flushed()
    assert read_bytes(log, 0) == ENTRY * 10


def test_the_log_manager_hands_its_flusher_to_every_log(make_manager, batch):
    flusher = ManualFlusher()
    manager = make_manager(flusher=flusher, policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    manager.get_or_create_log("t", 0).append(batch([b"ab"]))
    assert len(flusher.jobs) == 1
    flusher.jobs[0].run()  # closes the job's descriptor
