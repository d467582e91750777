"""What the consumer group tests (test_consumer_group_*.py) share: producing to the brokers,
reading the group's owner and offset nodes, streams collected on threads, and connectors with
test settings.

Brokers flush every message (the fixture's log.flush.interval=1) but publish flushes
asynchronously, and group members react to ZooKeeper watches: every check polls with a
deadline. Consumers run with short backoffs (rebalance.backoff.ms=200, fetcher.backoff.ms=50)
and ZooKeeper sessions of 1-4 s against a server whose tickTime is 200 ms.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import pytest
from kazoo.client import KazooClient

from tests.support.polling import wait_for
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.client.zookeeper_consumer import (ConsumerTimeout, KafkaStream, MessageAndMetadata,
                                                      ZookeeperConsumerConnector)
from twisted_broker.config import ConsumerConfig
from twisted_broker.registry import paths
from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo
from twisted_broker.codec.kafka07.message_set import encode_message_set

GROUP = "g"


def send(broker, topic: str, partition: int, payloads: Iterable[str]) -> list[str]:
    """Produce ``payloads`` to one partition of one broker; return them."""
    payloads = list(payloads)
    with SyncProducer("127.0.0.1", broker.port) as producer:
        producer.send(topic, partition, encode_message_set(p.encode() for p in payloads))
    return payloads


def fill(brokers, topic: str, partitions: int, count: int, tag: str) -> list[str]:
    """``count`` messages to every partition of every broker; payloads name their place."""
    sent = []
    for broker in brokers:
        for partition in range(partitions):
            sent += send(broker, topic, partition,
                         (f"{tag}-{broker.broker_id}-{partition}-{i}" for i in range(count)))
    return sent


def latest_offset(broker, topic: str, partition: int) -> int:
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        return consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]


def owners(zk: KazooClient, topic: str, group: str = GROUP) -> dict[str, str]:
    """``{partition name: owner thread id}`` from the owner nodes."""
    path = paths.owners_path(group, topic)
    if not zk.exists(path):
        return {}
    result = {}
    for name in zk.get_children(path):
        try:
            result[name] = paths.decode_owner(zk.get(f"{path}/{name}")[0])
        except Exception:  # noqa: BLE001 - vanished between the two calls
            pass
    return result


def committed(zk: KazooClient, topic: str, group: str = GROUP) -> dict[str, int]:
    path = paths.offsets_path(group, topic)
    if not zk.exists(path):
        return {}
    return {name: paths.decode_offset(zk.get(f"{path}/{name}")[0]) for name in zk.get_children(path)}


class Collector:
    """Iterates one stream on a thread of its own, keeping every message (thread-safe list)."""

    def __init__(self, stream: KafkaStream) -> None:
        self.stream, self.messages, self.errors = stream, [], []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = next(self.stream)
            except ConsumerTimeout:
                continue
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            with self._lock:
                self.messages.append(message)

    def snapshot(self) -> list[MessageAndMetadata]:
        with self._lock:
            return list(self.messages)

    def payloads(self) -> set[str]:
        return {m.payload.decode() for m in self.snapshot()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def connector_factory(zk_connect):
    """``connector_factory(consumerid=None, group=GROUP, **properties)``: a connector with test
    settings; properties use 0.7 keys (dots). All are shut down after the test."""
    made: list[ZookeeperConsumerConnector] = []

    def make(consumerid: str | None = None, group: str = GROUP, **properties: str) -> ZookeeperConsumerConnector:
        settings = {"zk.connect": zk_connect, "groupid": group, "zk.sessiontimeout.ms": "4000",
                    "zk.connectiontimeout.ms": "10000", "rebalance.backoff.ms": "200",
                    "rebalance.retries.max": "20", "fetcher.backoff.ms": "50", "socket.timeout.ms": "5000",
                    "consumer.timeout.ms": "100", "autocommit.interval.ms": "200"}
        if consumerid is not None:
            settings["consumerid"] = consumerid
        settings.update({key.replace("_", "."): value for key, value in properties.items()})
        connector = ZookeeperConsumerConnector(ConsumerConfig.from_properties(settings))
        made.append(connector)
        return connector

    yield make
    for connector in made:
        connector.shutdown()


@pytest.fixture
def collectors():
    started: list[Collector] = []

    def start(stream: KafkaStream) -> Collector:
        started.append(Collector(stream))
        return started[-1]

    yield start
    for collector in started:
        collector.stop()


def cluster(broker_factory, zk_connect, broker_ids=(0, 1), partitions: int = 4):
    return [broker_factory(f"broker{broker_id}", broker_id=broker_id, zk_connect=zk_connect,
                           properties={"num.partitions": str(partitions)})
            for broker_id in broker_ids]


def wait_registered(zk: KazooClient, topic: str, broker_ids: Iterable[int]) -> None:
    for broker_id in broker_ids:
        wait_for(lambda: zk.exists(paths.broker_topic_path(topic, broker_id)),
                 f"broker {broker_id} to register {topic}")


def consumed_all(collectors_: Iterable[Collector], expected: Iterable[str], extra: set[str] = frozenset()):
    expected = set(expected)
    return lambda: expected <= set().union(extra, *(c.payloads() for c in collectors_))


def known(info: ZkBrokerPartitionInfo, broker_id: int) -> bool:
    try:
        info.broker(broker_id)
        return True
    except KeyError:
        return False
