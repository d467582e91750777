"""Producer: where messages go (broker.list and a ZooKeeper-style BrokerPartitionInfo), which
topics are compressed, the client-side size check. SyncProducers are replaced by fakes."""

import random

import pytest

from twisted_broker.client.broker_partition_info import ConfigBrokerPartitionInfo, parse_broker_list
from twisted_broker.client.errors import InvalidPartition, NoBrokersForPartition, ProducerClosed
from twisted_broker.client.producer import Producer
from twisted_broker.config import ConfigError, ProducerConfig
from twisted_broker.errors import MessageSizeTooLarge
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message_set import iter_entries, iter_messages


class FakeSyncProducer:
    def __init__(self, broker_id, host, port):
        self.broker_id, self.address = broker_id, (host, port)
        self.sent: list[tuple[str, int, bytes]] = []
        self.multi_sends: list[list[tuple[str, int, bytes]]] = []
        self.closed = False

    def send(self, topic, partition, message_set):
        self.sent.append((topic, partition, bytes(message_set)))

    def multi_send(self, produces):
        self.multi_sends.append([(t, p, bytes(s)) for t, p, s in produces])

    def close(self):
        self.closed = True


class Fakes:
    def __init__(self):
        self.made: list[FakeSyncProducer] = []

    def __call__(self, broker_id, host, port):
        producer = FakeSyncProducer(broker_id, host, port)
        self.made.append(producer)
        return producer

    def sent(self):
        return [(p.broker_id, *s) for p in self.made for s in p.sent]


class FakeRegistry:
    """A BrokerPartitionInfo as the ZooKeeper one will behave: it may lag behind."""

    def __init__(self, partitions, brokers, after_refresh=None):
        self._partitions, self._brokers = partitions, brokers
        self._after_refresh = after_refresh
        self.refreshes = 0

    def partitions(self, topic):
        return list(self._partitions.get(topic, []))

    def broker(self, broker_id):
        return self._brokers[broker_id]

    def refresh(self):
        self.refreshes += 1
        if self._after_refresh:
            self._partitions, self._brokers = self._after_refresh


def config(**values) -> ProducerConfig:
    values.setdefault("broker_list", "0:h0:9092,1:h1:9093")
    return ProducerConfig(**values)


def payloads_of(message_set: bytes) -> list[bytes]:
    return [bytes(m.payload) for _o, _n, m in iter_messages(message_set)]


def test_broker_list_sends_to_a_random_broker_with_partition_minus_1():
    fakes = Fakes()
    producer = Producer(config(), sync_producer_factory=fakes, rng=random.Random(7))
    for i in range(40):
        producer.send("t", [b"m%d" % i], key="same key")  # the key is not used in broker.list mode
    sent = fakes.sent()
    assert {broker for broker, _t, _p, _s in sent} == {0, 1}
    assert {partition for _b, _t, partition, _s in sent} == {-1}
    assert {p.address for p in fakes.made} == {("h0", 9092), ("h1", 9093)}


def test_broker_list_refuses_a_partitioner():
    with pytest.raises(ConfigError):
        Producer(config(partitioner_class="my.Partitioner"))
    with pytest.raises(ConfigError):
        Producer(config(), partitioner=lambda key, n: 0)


def zk_producer(registry, **values) -> tuple[Producer, Fakes]:
    fakes = Fakes()
    producer = Producer(ProducerConfig(zk_connect="zk:2181", **values), broker_partition_info=registry,
                        sync_producer_factory=fakes, rng=random.Random(3))
    return producer, fakes


REGISTRY = {"t": [(0, 0), (0, 1), (1, 0), (2, 0)]}
BROKERS = {0: ("h0", 1), 1: ("h1", 2), 2: ("h2", 3)}


def test_a_key_picks_abs_hashcode_mod_n_of_the_sorted_partitions():
    producer, fakes = zk_producer(FakeRegistry(REGISTRY, BROKERS))
    producer.send("t", [b"m"], key="hello")  # 99162322 % 4 == 2 -> (1, 0)
    producer.send("t", [b"m"], key="a")      # 97 % 4 == 1 -> (0, 1)
    assert [(b, p) for b, _t, p, _s in fakes.sent()] == [(1, 0), (0, 1)]


def test_no_key_picks_a_random_partition():
    producer, fakes = zk_producer(FakeRegistry(REGISTRY, BROKERS))
    for _ in range(60):
        producer.send("t", [b"m"])
    assert {(b, p) for b, _t, p, _s in fakes.sent()} == set(REGISTRY["t"])


def test_a_custom_partitioner_is_used_and_checked():
    fakes = Fakes()
    producer = Producer(ProducerConfig(zk_connect="zk"), broker_partition_info=FakeRegistry(REGISTRY, BROKERS),
                        partitioner=lambda key, n: n - 1, sync_producer_factory=fakes)
    producer.send("t", [b"m"], key=object())
    assert [(b, p) for b, _t, p, _s in fakes.sent()] == [(2, 0)]
    bad = Producer(ProducerConfig(zk_connect="zk"), broker_partition_info=FakeRegistry(REGISTRY, BROKERS),
                   partitioner=lambda key, n: n, sync_producer_factory=Fakes())
    with pytest.raises(InvalidPartition):
        bad.send("t", [b"m"], key="k")


def test_an_unknown_broker_refreshes_the_registry_and_chooses_again():
    stale = FakeRegistry({"t": [(5, 0)]}, {}, after_refresh=({"t": [(1, 0)]}, BROKERS))
    producer, fakes = zk_producer(stale)
    producer.send("t", [b"m"], key="k")
    assert stale.refreshes == 1
    assert [(b, p) for b, _t, p, _s in fakes.sent()] == [(1, 0)]


def test_no_broker_after_zk_read_num_retries_refreshes_is_an_error():
    registry = FakeRegistry({}, {})
    producer, _fakes = zk_producer(registry, zk_read_num_retries=2)
    with pytest.raises(NoBrokersForPartition, match="topic t"):
        producer.send("t", [b"m"])
    assert registry.refreshes == 2


def test_a_broker_registered_again_elsewhere_gets_a_new_connection():
    registry = FakeRegistry({"t": [(0, 0)]}, {0: ("old", 1)})
    producer, fakes = zk_producer(registry)
    producer.send("t", [b"1"])
    registry._brokers = {0: ("new", 2)}
    producer.send("t", [b"2"])
    assert [(p.address, p.closed) for p in fakes.made] == [(("old", 1), True), (("new", 2), False)]


@pytest.mark.parametrize("codec, compressed_topics, topic, expected_codec", [
    (NO_COMPRESSION, (), "a", NO_COMPRESSION),
    (GZIP, (), "a", GZIP),                     # empty list: every topic
    (SNAPPY, (), "b", SNAPPY),
    (GZIP, ("a",), "a", GZIP),
    (GZIP, ("a",), "b", NO_COMPRESSION),       # not listed: sent plain
])
def test_compression_codec_applies_to_compressed_topics(codec, compressed_topics, topic, expected_codec):
    fakes = Fakes()
    producer = Producer(config(compression_codec=codec, compressed_topics=compressed_topics),
                        sync_producer_factory=fakes)
    producer.send(topic, [b"x", b"y", b"z"])
    [(_b, _t, _p, message_set)] = fakes.sent()
    entries = list(iter_entries(message_set))
    if expected_codec == NO_COMPRESSION:
        assert [m.codec for _o, _n, m in entries] == [0, 0, 0]
    else:
        assert [m.codec for _o, _n, m in entries] == [expected_codec]  # one wrapper per batch
    assert payloads_of(message_set) == [b"x", b"y", b"z"]


def test_a_payload_over_max_message_size_raises_before_anything_is_sent():
    fakes = Fakes()
    producer = Producer(config(max_message_size=10), sync_producer_factory=fakes)
    with pytest.raises(MessageSizeTooLarge) as caught:
        producer.send("t", [b"small", bytes(11)])
    assert (caught.value.position, caught.value.size, caught.value.limit) == (15, 11, 10)
    assert fakes.sent() == []


def test_the_serializer_class_encodes_values():
    fakes = Fakes()
    producer = Producer(config(serializer_class="kafka.serializer.StringEncoder"), sync_producer_factory=fakes)
    producer.send("t", ["héllo"])
    [(_b, _t, _p, message_set)] = fakes.sent()
    assert payloads_of(message_set) == ["héllo".encode()]


def test_async_mode_sends_one_multiproduce_per_broker_at_close():
    fakes = Fakes()
    producer = Producer(config(broker_list="0:h:1", producer_type="async", compression_codec=GZIP,
                               compressed_topics=("z",), queue_time=60000),
                        sync_producer_factory=fakes)
    producer.send("z", [b"1", b"2"])
    producer.send("p", [bytearray(b"3")])
    producer.close(timeout_s=10)
    [fake] = fakes.made
    [request] = fake.multi_sends
    assert [(t, p) for t, p, _s in request] == [("z", -1), ("p", -1)]
    assert [m.codec for _o, _n, m in iter_entries(request[0][2])] == [GZIP]
    assert payloads_of(request[0][2]) == [b"1", b"2"] and payloads_of(request[1][2]) == [b"3"]
    assert fake.closed


def test_send_after_close_raises():
    producer = Producer(config(), sync_producer_factory=Fakes())
    producer.close()
    with pytest.raises(ProducerClosed):
        producer.send("t", [b"m"])


def test_callbacks_are_refused_in_sync_mode():
    with pytest.raises(ConfigError):
        Producer(config(), after_send=lambda items, error: None)


# --- broker.list parsing ---------------------------------------------------------------------

def test_parse_broker_list():
    assert parse_broker_list("0:localhost:9092, 2:10.0.0.2:9093") == {
        0: ("localhost", 9092), 2: ("10.0.0.2", 9093)}


@pytest.mark.parametrize("text", ["", "localhost:9092", "x:h:1", "0:h:port", "0::1", "0:h:1,0:h:2", "0:h:70000"])
def test_parse_broker_list_refuses_malformed_lists(text):
    with pytest.raises(ValueError):
        parse_broker_list(text)


def test_config_broker_partition_info_counts_each_broker_as_one_partition():
    info = ConfigBrokerPartitionInfo("3:c:1,1:a:1,2:b:1")
    assert info.partitions("any") == [(1, -1), (2, -1), (3, -1)]
    assert info.broker(2) == ("b", 1)
    with pytest.raises(KeyError):
        info.broker(9)
