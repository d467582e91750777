"""One topic, both protocols: what this project's 0.7 producer writes (plain and in gzip and
snappy wrappers) is read by today's clients; what they write (keys, headers, any compression)
is read by the 0.7 consumer as one message per record, its value as the payload; and writes
interleaved from both sides come out in the same order through both ports."""

from __future__ import annotations

import time

import pytest

from tests.support.kafka_clients import client_confluent, client_kafka_python
from tests.support.kafka_clients.records import sample_records, values
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
pytestmark = pytest.mark.needs_api(PRODUCE, FETCH, LIST_OFFSETS, METADATA)


def produce_07(broker, topic: str, payloads: list[bytes], codec: int | None = None) -> None:
    producer = SyncProducer("127.0.0.1", broker.port)
    try:
        data = encode_message_set(payloads) if codec is None else encode_compressed_message_set(payloads, codec)
        producer.send(topic, 0, data)
    finally:
        producer.close()


def consume_07(broker, topic: str, count: int, timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """(0.7 offset, payload) of the first ``count`` messages of partition 0, wrappers expanded."""
    found, offset = [], 0
    deadline = time.monotonic() + timeout_s
    consumer = SimpleConsumer("127.0.0.1", broker.port)
    try:
        while len(found) < count and time.monotonic() < deadline:
            fetched = consumer.fetch(FetchRequest(topic, 0, offset, 1 << 20))
            assert fetched.error_code == 0, fetched.error_code
            found += [(start, bytes(message.payload)) for start, _next, message in fetched]
            if not fetched.valid_bytes:
                time.sleep(0.05)
            offset = fetched.next_offset
    finally:
        consumer.close()
    return found


@pytest.mark.parametrize("codec", [None, GZIP, SNAPPY], ids=["plain", "gzip", "snappy"])
@pytest.mark.parametrize("reader", [client_confluent, client_kafka_python], ids=lambda c: c.NAME)
def test_modern_clients_read_what_the_07_producer_wrote(modern_broker, topic, codec, reader):
    payloads = [f"from 0.7 #{i}".encode() for i in range(30)]
    produce_07(modern_broker, topic, payloads[:10], codec)
    produce_07(modern_broker, topic, payloads[10:], codec)
    consumed = reader.consume(modern_broker.bootstrap, topic, len(payloads))
    assert values(consumed) == payloads
    assert all(c.record.key is None and c.record.headers == () for c in consumed)
    offsets = [c.offset for c in consumed]
    assert offsets == sorted(set(offsets))
    if codec is None:  # D1: an uncompressed 0.7 message's modern offset is its byte position
        assert offsets == [offset for offset, _ in consume_07(modern_broker, topic, len(payloads))]


@pytest.mark.parametrize("compression", client_confluent.COMPRESSIONS)
def test_the_07_consumer_reads_one_message_per_modern_record(modern_broker, topic, compression):
    sent = sample_records(25, f"to-0.7-{compression}")
    client_confluent.produce(modern_broker.bootstrap, topic, sent, compression=compression)
    assert [payload for _, payload in consume_07(modern_broker, topic, len(sent))] == [r.value for r in sent]


def test_interleaved_writes_of_both_protocols_read_alike_through_both_ports(modern_broker, topic):
    expected = []
    for round_ in range(3):
        old = [f"0.7 round {round_} #{i}".encode() for i in range(5)]
        produce_07(modern_broker, topic, old, GZIP if round_ == 1 else None)
        expected += old
        # 0.7's produce has no answer: wait until it is in the log, or the next write could pass it
        assert len(consume_07(modern_broker, topic, len(expected))) == len(expected)
        new = sample_records(5, f"modern-round-{round_}")
        client_kafka_python.produce(modern_broker.bootstrap, topic, new, compression="lz4")
        expected += [r.value for r in new]
    assert [payload for _, payload in consume_07(modern_broker, topic, len(expected))] == expected
    assert values(client_confluent.consume(modern_broker.bootstrap, topic, len(expected))) == expected
