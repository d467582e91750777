"""Test data for the Spark tests: producing to real brokers, and the reference reading.

The reference for every comparison is the project's own consumer: SimpleConsumer fetches
iterated with 0.7's offsets (client/fetched_message_set.py), one broker-partition at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.codec.kafka07.compression import NO_COMPRESSION
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest

# One row as the data source reports it, without the topic.
Row = tuple[int, int, int, int, bytes]  # broker_id, partition, offset, next_offset, payload


@dataclass
class Cluster:
    zk_connect: str
    brokers: list  # BrokerProcess, index = broker id
    ends: dict[tuple[str, int, int], int] = field(default_factory=dict)  # (topic, broker, partition) -> bytes sent

    def broker_list(self) -> str:
        return ",".join(f"{broker.broker_id}:127.0.0.1:{broker.port}" for broker in self.brokers)

    def produce(self, topic: str, broker_id: int, partition: int, payloads: list[bytes],
                codec: int = NO_COMPRESSION) -> None:
        """One produce request: ``payloads`` plain, or all in one wrapper of ``codec``."""
        message_set = encode_compressed_message_set(payloads, codec)
        key = (topic, broker_id, partition)
        if key not in self.ends:
            self.ends[key] = self.latest(topic, broker_id, partition)
        with SyncProducer("127.0.0.1", self.brokers[broker_id].port) as producer:
            producer.send(topic, partition, message_set)
        self.ends[key] += len(message_set)

    def latest(self, topic: str, broker_id: int, partition: int) -> int:
        with SimpleConsumer("127.0.0.1", self.brokers[broker_id].port) as consumer:
            return consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]

    def wait_flushed(self, timeout_s: float = 15.0) -> None:
        """Wait until every partition produced to shows all its bytes as flushed (latest
        offset), and ZooKeeper lists each topic on every broker that holds it."""
        deadline = time.monotonic() + timeout_s
        for (topic, broker_id, partition), end in self.ends.items():
            while (latest := self.latest(topic, broker_id, partition)) < end:
                assert time.monotonic() < deadline, f"{topic} {broker_id}-{partition} stayed at {latest} < {end}"
                time.sleep(0.02)
        from twisted_broker.registry.cluster_view import ClusterView
        expected: dict[str, set[int]] = {}
        for topic, broker_id, _partition in self.ends:
            expected.setdefault(topic, set()).add(broker_id)
        with ClusterView(self.zk_connect) as view:
            for topic, broker_ids in expected.items():
                while not broker_ids <= set(view.topic_brokers(topic)):
                    assert time.monotonic() < deadline, f"{topic} not registered by brokers {broker_ids}"
                    time.sleep(0.02)

    def reference_rows(self, topic: str, start: dict[str, int] | None = None) -> list[Row]:
        """Every message of every partition produced to, in log order per partition."""
        rows: list[Row] = []
        for (name, broker_id, partition) in sorted(self.ends):
            if name != topic:
                continue
            offset = (start or {}).get(f"{broker_id}-{partition}", 0)
            end = self.latest(topic, broker_id, partition)
            with SimpleConsumer("127.0.0.1", self.brokers[broker_id].port) as consumer:
                while offset < end:
                    fetched = consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20))
                    rows += [(broker_id, partition, o, n, bytes(m.payload)) for o, n, m in fetched]
                    offset = fetched.next_offset
        return rows


def rows_of(dataframe) -> list[Row]:
    """The data source's rows in the order Spark returns them (partition order, then log order)."""
    return [(r.broker_id, r.partition, r.offset, r.next_offset, bytes(r.payload))
            for r in dataframe.select("broker_id", "partition", "offset", "next_offset", "payload").collect()]


def payloads(prefix: str, count: int, size: int = 0) -> list[bytes]:
    """Distinct payloads ``prefix-0``, ``prefix-1``... padded with ``.`` to ``size`` bytes."""
    return [f"{prefix}-{index}".encode().ljust(size, b".") for index in range(count)]
