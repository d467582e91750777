"""Pipelined 0.7 Produce requests to one partition, appended as one message set (issue 24):
KafkaServerProtocol on a StringTransport over a real Broker and LogManager in tmp_path.

What the log holds, what the figures count and how bad input is answered must be what
serving the requests one at a time gives: only the number of writes differs.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from twisted.internet.testing import StringTransport

from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import ProduceRequest, encode_request
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.network.connection import REQUESTS_PER_TURN
from twisted_broker.network.kafka07 import KafkaServerProtocol
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.segment import Segment

from tests.support.leader_replica import leader_replica

MAX_MESSAGE_BYTES = 1000


def produce(partition: int, message_set: bytes, topic: str = "a") -> bytes:
    return encode_request(ProduceRequest(topic, partition, message_set))


def one(payload: bytes) -> bytes:
    return encode_message_set([payload])


def log_manager(directory, file_size: int = 3 << 20, flush_interval: int = 1) -> LogManager:
    manager = LogManager(str(directory), now=lambda: 1_000_000.0, partitions_for=lambda topic: 4,
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=flush_interval, file_size=file_size,
                                                            retention_ms=3600 * 1000),
                         flusher=InlineFlusher())
    manager.open()
    return manager


@pytest.fixture
def logs(tmp_path):
    manager = log_manager(tmp_path / "logs")
    yield manager
    manager.close()


def connect(logs, **options) -> tuple[StringTransport, KafkaServerProtocol, Broker]:
    broker = Broker(logs, BrokerStats(RequestStats(600, lambda: 1_000_000.0)), max_message_size=MAX_MESSAGE_BYTES,
                    **options)
    transport = StringTransport()
    protocol = KafkaServerProtocol(broker, max_request_size=1 << 20)
    protocol.makeConnection(transport)
    return transport, protocol, broker


def stored(logs, partition: int = 0) -> bytes:
    log = logs.get_log("a", partition)
    if log is None:
        return b""
    return b"".join(Path(segment.path).read_bytes() for segment in log.segments)


@pytest.fixture
def writes(monkeypatch) -> list[int]:
    """The size of each segment write."""
    sizes: list[int] = []
    append = Segment.append

    def counted(segment, data, now):
        sizes.append(len(data))
        return append(segment, data, now)
    monkeypatch.setattr(Segment, "append", counted)
    return sizes


def test_a_run_to_one_partition_is_one_write_of_the_same_bytes_and_counts_each_request(logs, writes):
    transport, protocol, broker = connect(logs)
    payloads = [b"m%d" % i for i in range(50)]
    protocol.dataReceived(b"".join(produce(0, one(p)) for p in payloads))
    assert stored(logs) == b"".join(one(p) for p in payloads)
    assert writes == [len(stored(logs))]
    assert not transport.disconnecting and transport.value() == b""
    figures = broker.stats.requests.snapshot()["requests"]["produce"]
    assert figures["count"] == 50 and figures["max_ms"] == pytest.approx(figures["avg_ms"])  # each at the average
    assert broker.stats.topic("a").messages_in == broker.stats.all_topics.messages_in == 50
    (connection,) = broker.stats.requests.open_connections
    assert (connection.requests, connection.responses, connection.last_request) == (50, 0, "produce")


def test_a_run_ends_at_another_partition_and_each_keeps_its_order(logs, writes):
    _, protocol, _ = connect(logs)
    order = [0, 0, 1, 1, 1, 0, 2, 0]
    protocol.dataReceived(b"".join(produce(p, one(b"%d-%d" % (p, i))) for i, p in enumerate(order)))
    for partition in (0, 1, 2):
        assert stored(logs, partition) == b"".join(one(b"%d-%d" % (p, i)) for i, p in enumerate(order) if p == partition)
    assert len(writes) == 5  # 0 0 | 1 1 1 | 0 | 2 | 0


def test_a_bad_message_in_a_run_keeps_those_before_it_and_closes_the_connection(logs):
    transport, protocol, broker = connect(logs)
    bad = one(b"bad")[:-1] + b"?"  # its CRC no longer matches
    protocol.dataReceived(produce(0, one(b"1")) + produce(0, one(b"2")) + produce(0, bad) + produce(0, one(b"3")))
    assert stored(logs) == one(b"1") + one(b"2")
    assert transport.disconnecting and transport.value() == b""
    assert broker.stats.topic("a").failed_produce_requests == 1


def test_an_oversize_message_in_a_run_is_dropped_alone_as_0_7_drops_it(logs):
    transport, protocol, _ = connect(logs)
    oversize = one(b"x" * (MAX_MESSAGE_BYTES + 1))
    protocol.dataReceived(produce(0, one(b"1")) + produce(0, oversize) + produce(0, one(b"2")))
    assert stored(logs) == one(b"1") + one(b"2")
    assert not transport.disconnecting


def test_a_partial_tail_in_a_run_is_dropped_and_not_joined_to_the_next_set(logs):
    _, protocol, _ = connect(logs)
    whole = one(b"abc")
    # Joined, this set's 9-byte tail and the next set would read as two whole messages.
    protocol.dataReceived(produce(0, whole + whole[:9]) + produce(0, whole[9:] + one(b"d")) + produce(0, one(b"e")))
    # 0.7 drops the first set's tail silently; the second set starts with a partial entry: refused.
    assert stored(logs) == whole


def test_compressed_sets_in_a_backlog_go_alone_and_the_plain_ones_between_them_join(logs, writes):
    _, protocol, broker = connect(logs)
    gzipped = [encode_compressed_message_set([b"g%d" % i] * 3, GZIP) for i in range(2)]
    sets = [gzipped[0], one(b"1"), one(b"2"), gzipped[1], one(b"3")]
    protocol.dataReceived(b"".join(produce(0, s) for s in sets))
    assert stored(logs) == b"".join(sets)
    assert writes == [len(gzipped[0]), 2 * len(one(b"1")), len(gzipped[1]), len(one(b"3"))]
    assert broker.stats.topic("a").messages_in == 3 + 2 + 3 + 1


def test_a_run_goes_only_to_a_named_partition_by_a_readable_topic_name(logs):
    _, _, broker = connect(logs)
    assert broker.run_target(b"a", -1) is None  # the usual path chooses per request
    assert broker.run_target(b"\xff", 0) is None  # the usual path refuses the name
    assert broker.run_target(b"a", 9) is None  # WrongPartition: the usual path says so
    assert broker.run_target(b"a", 3) == ("a", 3, logs.get_log("a", 3), None)  # no replica: a 0.7 topic


def test_a_run_to_a_replicated_partition_this_broker_leads_is_one_append_committed_at_once(logs, tmp_path, writes):
    replica, _, replication, _ = leader_replica(tmp_path, isr=(0,), topic="r")
    _, protocol, broker = connect(logs, replication=replication)
    replication.stats = broker.stats
    sets = [one(b"m%d" % i) for i in range(40)]
    protocol.dataReceived(b"".join(produce(0, s, topic="r") for s in sets))
    assert writes == [len(b"".join(sets))]
    assert b"".join(Path(s.path).read_bytes() for s in replica.log.segments) == b"".join(sets)
    # A one-replica ISR: committed by the append itself, as one request's append commits.
    assert replica.log.high_watermark == replica.log.written_end == len(b"".join(sets))
    assert broker.stats.topic("r").messages_in == 40
    assert logs.get_log("r", 0) is None  # no 0.7 log beside the replica's


def test_a_run_to_a_replicated_partition_gets_the_checks_each_request_would(logs, tmp_path, writes):
    replica, manager, replication, _ = leader_replica(tmp_path, isr=(0,), min_insync_replicas=2, topic="r")
    transport, protocol, broker = connect(logs, replication=replication)
    replication.stats = broker.stats
    protocol.dataReceived(b"".join(produce(0, one(b"m%d" % i), topic="r") for i in range(5)))
    # Not enough in-sync replicas: the usual path refuses the first request, counted once.
    assert transport.disconnecting and writes == [] and replica.log.written_end == 0
    assert manager.not_enough_replicas == 1
    assert broker.run_target(b"r", 0) is None and manager.not_enough_replicas == 1


def test_produces_to_a_random_partition_each_choose_their_own(logs):
    chosen = itertools.cycle([0, 1, 2])
    _, protocol, _ = connect(logs, choose=lambda n: next(chosen))
    protocol.dataReceived(b"".join(produce(-1, one(b"%d" % i)) for i in range(6)))
    assert [stored(logs, p) for p in (0, 1, 2)] == [one(b"0") + one(b"3"), one(b"1") + one(b"4"), one(b"2") + one(b"5")]


def test_under_acls_each_produce_is_checked(logs):
    transport, protocol, _ = connect(logs, authorizer=AclAuthorizer())  # no ACL: nobody may write
    protocol.dataReceived(produce(0, one(b"1")) + produce(0, one(b"2")))
    assert transport.disconnecting
    assert stored(logs) == b""


def test_a_run_is_at_most_one_turn_of_requests(logs, writes):
    _, protocol, _ = connect(logs)
    protocol.dataReceived(b"".join(produce(0, one(b"%03d" % i)) for i in range(REQUESTS_PER_TURN * 2 + 5)))
    assert [size // len(one(b"000")) for size in writes] == [REQUESTS_PER_TURN, REQUESTS_PER_TURN, 5]


def segment_layout(manager: LogManager) -> list[tuple[str, int]]:
    return [(os.path.basename(segment.path), segment.size) for segment in manager.get_log("a", 0).segments]


def test_segments_roll_where_appending_each_request_in_turn_rolls_them(tmp_path, writes):
    sizes = [15, 40, 15, 15, 90, 15, 15, 15, 15, 15, 200, 15, 15]  # log.file.size 100: rolls between them
    frames = [produce(0, one(b"x" * (size - 10))) for size in sizes]
    together, apart = log_manager(tmp_path / "together", file_size=100), log_manager(tmp_path / "apart", file_size=100)
    try:
        connect(together)[1].dataReceived(b"".join(frames))
        in_runs = len(writes)
        for frame in frames:
            connect(apart)[1].dataReceived(frame)  # one request per read: each appended alone
        assert segment_layout(together) == segment_layout(apart)
        # 0.7 rolls once a segment has passed the size: 15+40+15+15+90 | 5 x 15+200 | 15+15
        assert [size for _, size in segment_layout(apart)] == [175, 275, 30]
        assert in_runs == len(segment_layout(together)) < len(frames)
    finally:
        together.close()
        apart.close()


@pytest.mark.parametrize("counts, reads, left", [
    ([1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 4, 1], [12], 1),  # one at a time: flushes after messages 7, 12 and 18
    ([2, 3, 1, 4], [4], 0),  # a flush after the 5th and the 10th: the last request starts one, none left
    # The first read's run reaches 5 at its third request and leaves its fourth's 1 message to
    # the count, as one at a time does; the next read's 4 then reach 5 again: the burst of 10
    # ends with a flush, as a producer sending a multiple of log.flush.interval expects.
    ([3, 1, 1, 1, 1, 3], [4, 2], 0),
])
def test_the_flush_count_goes_on_as_appending_each_request_in_turn_leaves_it(tmp_path, counts, reads, left):
    frames = [produce(0, encode_message_set([b"m"] * count)) for count in counts]
    together = log_manager(tmp_path / "together", flush_interval=5)
    apart = log_manager(tmp_path / "apart", flush_interval=5)
    try:
        protocol, first = connect(together)[1], 0
        for read in reads:
            protocol.dataReceived(b"".join(frames[first:first + read]))
            first += read
        for frame in frames:
            connect(apart)[1].dataReceived(frame)
        run, alone = together.get_log("a", 0), apart.get_log("a", 0)
        assert run.unflushed_messages == alone.unflushed_messages == left
        assert run.flushed_end >= alone.flushed_end > 0  # the run's flush covers at least as much
        if not left:  # a burst of a multiple of the interval is flushed whole, as one at a time
            assert run.flushed_end == alone.flushed_end == run.written_end
    finally:
        together.close()
        apart.close()
