"""wait_visible: acks=all on a 0.7 topic waits for the flush that makes the batch visible."""

from __future__ import annotations

from twisted.internet.task import Clock

from twisted_broker.handlers.kafka.produce import wait_visible
from twisted_broker.codec.kafka07.replication_errors import RequestTimedOut


class FlushedLog:
    """What wait_visible uses of a Log: its visible end, start_flush and the flush watchers."""

    name = "a-0"

    def __init__(self, end_offset: int = 0) -> None:
        self.end_offset = end_offset
        self.flushes_started = 0
        self.watchers: list = []

    def start_flush(self) -> None:
        self.flushes_started += 1

    def watch_flush(self, callback) -> None:
        self.watchers.append(callback)

    def unwatch_flush(self, callback) -> None:
        if callback in self.watchers:
            self.watchers.remove(callback)

    def publish(self, end_offset: int, at_once: bool = False) -> None:
        self.end_offset = end_offset
        watchers, self.watchers = self.watchers, []
        for callback in watchers:
            callback(at_once)


def test_an_already_visible_end_fires_at_once_after_asking_for_the_flush():
    log, clock = FlushedLog(100), Clock()
    fired = []
    wait_visible(log, 100, 1000, clock).addCallback(fired.append)
    assert fired == [None] and log.flushes_started == 1
    assert log.watchers == [] and clock.getDelayedCalls() == []


def test_a_flush_that_publishes_the_end_fires_from_the_next_reactor_step():
    log, clock = FlushedLog(0), Clock()
    fired = []
    wait_visible(log, 100, 1000, clock).addCallback(fired.append)
    log.publish(50)  # not far enough: waits on
    clock.advance(0)
    assert fired == [] and len(log.watchers) == 1
    log.publish(100)
    assert fired == []  # not inside the log's publishing
    clock.advance(0)
    assert fired == [None]
    assert log.watchers == [] and clock.getDelayedCalls() == []


def test_a_flush_published_where_the_broker_hears_of_it_fires_there_and_then():
    log, clock = FlushedLog(0), Clock()
    fired = []
    wait_visible(log, 100, 1000, clock).addCallback(fired.append)
    log.publish(50, at_once=True)  # not far enough: waits on, with a new deadline timer only
    assert fired == [] and len(log.watchers) == 1 and len(clock.getDelayedCalls()) == 1
    log.publish(100, at_once=True)
    assert fired == [None]
    assert log.watchers == [] and clock.getDelayedCalls() == []


def test_no_flush_in_time_fails_with_request_timed_out_at_the_deadline():
    log, clock = FlushedLog(0), Clock()
    failed = []
    wait_visible(log, 100, 1000, clock).addErrback(lambda failure: failed.append(failure.value))
    clock.advance(0.999)
    assert failed == []
    clock.advance(0.001)
    assert len(failed) == 1 and isinstance(failed[0], RequestTimedOut)
    assert log.watchers == [] and clock.getDelayedCalls() == []


def test_an_acks_all_produce_lets_the_requests_behind_it_go_unless_its_batches_are_an_idempotent_producers(tmp_path):
    # network/connection.py's overtakes (issue 23), and the nemesis of 2026-12-06 (two of an
    # idempotent producer's batches stored twice): idempotent producers keep one request at a time.
    import os
    import time

    from twisted.internet.defer import succeed

    from twisted_broker.codec.kafka.protocol import Request
    from twisted_broker.codec.kafka.record_batch import build_batch
    from twisted_broker.handlers.kafka.partitions import Target
    from twisted_broker.handlers.kafka.produce import ProduceRequests
    from twisted_broker.server.stats import BrokerStats, RequestStats
    from twisted_broker.storage.log import Log, LogPolicy
    from twisted_broker.storage.log_directory import open_log_directory

    path = str(tmp_path / "a-0")
    os.makedirs(path)
    log = Log(path, "a", 0, open_log_directory(path, time.time()), policy=LogPolicy(), now=time.time)

    class Partitions:
        def for_write(self, topic, partition, acks):
            return succeed(Target(log, None, 0))

    produce = ProduceRequests(Partitions(), BrokerStats(RequestStats(60, time.time)), max_batch_bytes=1 << 20, clock=Clock(), producer_ids=None)

    def request(**ids):
        batch = build_batch([(0, None, b"v", [])], **ids)
        return Request(0, 7, 1, "c", {"transactional_id": None, "acks": -1, "timeout_ms": 30_000, "topic_data": [
            {"name": "a", "partition_data": [{"index": 0, "records": memoryview(batch)}]}]})

    assert produce.produce(request()).writes_done()  # appended: only its acknowledgement may wait
    idempotent = produce.produce(request(producer_id=7, producer_epoch=0, base_sequence=0))
    assert log.written_end > 0 and not idempotent.writes_done()
    log.close()
