"""SyncProducer and SimpleConsumer against a real broker: round trips of plain, gzip and snappy
sets with 0.7 offsets, multifetch, offsets, size limits, and reconnecting.

Flushes run on a background thread, so a produce becomes visible a moment later: ``consume``
polls with a deadline instead of sleeping.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.polling import consume
from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME, SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.errors import InvalidFetchSize, MessageSizeTooLarge, WrongPartition


def wait_for_end(consumer: SimpleConsumer, topic: str, end: int, partition: int = 0,
                 timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while consumer.get_offsets_before(topic, partition, LATEST_TIME, 1) != [end]:
        assert time.monotonic() < deadline, f"{topic}-{partition} never reached offset {end}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("client-sync") / "broker").start()
    yield broker
    broker.kill()


@pytest.fixture
def producer(shared_broker):
    with SyncProducer("127.0.0.1", shared_broker.port) as producer:
        yield producer


@pytest.fixture
def consumer(shared_broker):
    with SimpleConsumer("127.0.0.1", shared_broker.port, socket_timeout_ms=10000) as consumer:
        yield consumer


def test_plain_gzip_and_snappy_sets_come_back_with_0_7_offsets(producer, consumer):
    plain = encode_message_set([b"p1", b"p2"])
    gzip = encode_compressed_message_set([b"g1", b"g2", b"g3"], GZIP)
    snappy = encode_compressed_message_set([b"s1", b"s2"], SNAPPY)
    for message_set in (plain, gzip, snappy):
        producer.send("round-trip", 0, message_set)
    g, s = len(plain), len(plain) + len(gzip)  # where the wrappers start
    end = s + len(snappy)
    assert consume(consumer, "round-trip", 7) == [
        (0, 12, b"p1"), (12, 24, b"p2"),
        (g, g, b"g1"), (g, g, b"g2"), (g, s, b"g3"),   # inner messages report the wrapper start,
        (s, s, b"s1"), (s, end, b"s2"),                # the last one the offset after it
    ]


def test_fetching_from_a_reported_next_offset_resumes_after_it(producer, consumer):
    producer.multi_send([("resume", 0, encode_message_set([b"a", b"b", b"c"]))])
    _o, next_offset, _p = consume(consumer, "resume", 3)[1]
    assert [payload for _o, _n, payload in consume(consumer, "resume", 1, offset=next_offset)] == [b"c"]


def test_multifetch_answers_each_partition_in_order(producer, consumer):
    producer.multi_send([("mf-a", 0, encode_message_set([b"a"])), ("mf-b", 0, encode_message_set([b"b1", b"b2"]))])
    wait_for_end(consumer, "mf-a", 11)
    wait_for_end(consumer, "mf-b", 24)
    a, b, wrong = consumer.multifetch([FetchRequest("mf-a", 0, 0, 4096), FetchRequest("mf-b", 0, 0, 4096),
                                       FetchRequest("mf-a", 7, 0, 4096)])
    assert [bytes(m.payload) for _o, _n, m in a] == [b"a"]
    assert [bytes(m.payload) for _o, _n, m in b] == [b"b1", b"b2"]
    assert (b.next_offset, wrong.error_code) == (24, WrongPartition.code)
    with pytest.raises(WrongPartition):
        wrong.check()


def test_get_offsets_before_latest_earliest_and_times(producer, consumer):
    assert consumer.get_offsets_before("offsets-empty", 0, LATEST_TIME, 5) == [0]
    producer.send("offsets", 0, encode_message_set([b"x" * 10]))
    wait_for_end(consumer, "offsets", 20)
    assert consumer.get_offsets_before("offsets", 0, LATEST_TIME, 5) == [20, 0]
    assert consumer.get_offsets_before("offsets", 0, EARLIEST_TIME, 5) == [0]
    assert consumer.get_offsets_before("offsets", 0, LATEST_TIME, 1) == [20]
    assert consumer.get_offsets_before("offsets", 0, 1, 5) == []  # before any segment was written
    far_future = int(time.time() * 1000) + 3600 * 1000
    assert consumer.get_offsets_before("offsets", 0, far_future, 5) == [20, 0]


def test_a_message_larger_than_the_fetch_size_is_reported(producer, consumer):
    producer.send("too-big", 0, encode_message_set([bytes(5000)]))
    wait_for_end(consumer, "too-big", 5010)
    fetched = consumer.fetch(FetchRequest("too-big", 0, 0, 1000))
    assert fetched.size_bytes == 1000 and fetched.next_offset == 0
    with pytest.raises(InvalidFetchSize, match="needs 5010 bytes, larger than the fetch size of 1000"):
        list(fetched)


def test_max_message_size_refuses_before_sending(shared_broker, consumer):
    with SyncProducer("127.0.0.1", shared_broker.port, max_message_size=100) as producer:
        with pytest.raises(MessageSizeTooLarge):
            producer.send("limited", 0, encode_message_set([b"ok", bytes(101)]))
        with pytest.raises(MessageSizeTooLarge):
            producer.multi_send([("limited", 0, encode_message_set([b"ok"])),
                                 ("limited", 0, encode_message_set([bytes(101)]))])
        producer.send("limited", 0, encode_message_set([bytes(100)]))
    # The refused requests never went out: the allowed message is the first in the log.
    assert [(o, len(p)) for o, _n, p in consume(consumer, "limited", 1)] == [(0, 100)]


def test_a_producer_reconnects_after_the_broker_closed_its_connection(producer, consumer):
    producer.send("bad/topic", 0, encode_message_set([b"refused"]))  # the broker closes the connection
    time.sleep(0.2)  # let the close arrive, as it would between two sends of a real producer
    producer.send("after-refusal", 0, encode_message_set([b"kept"]))
    assert [p for _o, _n, p in consume(consumer, "after-refusal", 1)] == [b"kept"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_producer_and_consumer_work_again_after_the_broker_is_killed_and_restarted(broker_factory):
    port = free_port()
    broker = broker_factory(properties={"port": str(port)})
    with SyncProducer("127.0.0.1", port) as producer, SimpleConsumer("127.0.0.1", port) as consumer:
        producer.send("restart", 0, encode_message_set([b"before"]))
        assert [p for _o, _n, p in consume(consumer, "restart", 1)] == [b"before"]
        broker.kill()
        broker.start()
        assert broker.port == port
        producer.send("restart", 0, encode_message_set([b"after"]))
        assert [p for _o, _n, p in consume(consumer, "restart", 2)] == [b"before", b"after"]
