"""The high-level Producer against real brokers: async close() loses nothing, broker.list
spreads messages over its brokers, compressed topics round-trip."""

from __future__ import annotations

import time

from tests.support.polling import consume
from twisted_broker.client.producer import Producer
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.config import ProducerConfig


def test_async_close_sends_every_queued_message(broker):
    config = ProducerConfig(broker_list=f"0:127.0.0.1:{broker.port}", producer_type="async",
                            batch_size=200, queue_time=60000)  # only batch.size and close send
    payloads = [b"message-%05d" % i for i in range(10000)]
    producer = Producer(config)
    for payload in payloads:
        producer.send("async", [payload])
    producer.close(timeout_s=60)
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        assert [p for _o, _n, p in consume(consumer, "async", len(payloads))] == payloads


def test_async_compressed_batches_come_back_whole(broker):
    config = ProducerConfig(broker_list=f"0:127.0.0.1:{broker.port}", producer_type="async",
                            compression_codec=GZIP, batch_size=50, queue_time=60000)
    payloads = [b"gz-%03d" % i for i in range(120)]
    with Producer(config) as producer:
        for payload in payloads:
            producer.send("async-gzip", [payload])
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        found = consume(consumer, "async-gzip", len(payloads))
        assert [p for _o, _n, p in found] == payloads
        # 120 messages in batches of 50: three wrappers, so three distinct resume points.
        assert len({n for o, n, _p in found if n != o}) == 3


def test_broker_list_spreads_messages_over_both_brokers(broker_factory):
    first, second = broker_factory("first", broker_id=0), broker_factory("second", broker_id=1)
    config = ProducerConfig(broker_list=f"0:127.0.0.1:{first.port},1:127.0.0.1:{second.port}")
    expected = [b"m%02d" % i for i in range(60)]
    with Producer(config) as producer:
        for payload in expected:
            producer.send("spread", [payload])
    consumers = [SimpleConsumer("127.0.0.1", broker.port) for broker in (first, second)]
    try:
        # Each message went alone in one entry of 4 + 6 + 3 bytes, to one broker or the other.
        deadline = time.monotonic() + 10
        while sum(c.get_offsets_before("spread", 0, LATEST_TIME, 1)[0] for c in consumers) != 13 * len(expected):
            assert time.monotonic() < deadline, "not every message became visible"
            time.sleep(0.02)
        found = [[bytes(m.payload) for _o, _n, m in c.fetch(FetchRequest("spread", 0, 0, 1 << 20))]
                 for c in consumers]
    finally:
        for consumer in consumers:
            consumer.close()
    assert all(found), f"a broker got nothing: {[len(f) for f in found]}"
    assert sorted(found[0] + found[1]) == expected


def test_sync_producer_with_a_key_and_compression_round_trips(broker):
    config = ProducerConfig(broker_list=f"0:127.0.0.1:{broker.port}", compression_codec=GZIP,
                            serializer_class="kafka.serializer.StringEncoder")
    with Producer(config) as producer:
        producer.send("sync-gzip", ["ä", "b"])
        producer.send("sync-gzip", ["c"])
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        assert [p for _o, _n, p in consume(consumer, "sync-gzip", 3)] == ["ä".encode(), b"b", b"c"]
