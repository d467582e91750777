"""Replication on real brokers: three ``twistd -n broker`` processes and one real ZooKeeper.

``ReplicatedCluster`` (the fixtures ``replicated_cluster`` and ``three_brokers``, registered
for every folder by tests/conftest.py) starts brokers 0, 1 and 2 on loopback in a ZooKeeper
chroot of their own, with replication's keys set for quick failover (2 s sessions, 2 s replica
lag); ``Wire`` talks to one broker with replication's request types and 0.7's fetch, through
the project's codecs. Every fixture stops what it started; the fault tests record their figures
into the reliability suite's summary (tests/support/reliability.py). The helpers at the end (``produce_all``, ``committed``, ``all_in_sync``, ``segment_bytes``)
are what the replication tests, tests/spark and tests/kafka_clients ask of such a cluster.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, WireClient
from tests.support.polling import wait_for
from tests.support.zookeeper import new_chroot
from twisted_broker.registry import replication_paths
from twisted_broker.codec.kafka07.message_set import encode_message_set, iter_entries, valid_bytes
from twisted_broker.codec.kafka07.replication import (
    MetadataRequest, ProduceAckRequest, decode_metadata, decode_produce_acks, encode_replication_request,
)
from twisted_broker.codec.kafka07.requests import FetchRequest, MultiProduceRequest, ProduceRequest, encode_request

FAST = {"zk.sessiontimeout.ms": "2000", "replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "200",
        "default.replication.factor": "3", "num.partitions": "2", "log.flush.interval": "10000",
        "log.default.flush.interval.ms": "1000", "controlled.shutdown.max.ms": "5000"}


class ReplicatedCluster:
    def __init__(self, root, zk_connect: str, properties: dict[str, str]) -> None:
        self.root, self.zk_connect, self.properties = root, zk_connect, properties
        self.brokers: dict[int, BrokerProcess] = {}

    def start(self, broker_id: int) -> BrokerProcess:
        return self.started(self.broker(broker_id).start())

    def broker(self, broker_id: int) -> BrokerProcess:
        """Broker ``broker_id``'s process, made on first use (kept across restarts)."""
        broker = self.brokers.get(broker_id)
        if broker is None:
            broker = self.brokers[broker_id] = BrokerProcess(
                self.root / f"broker-{broker_id}", broker_id=broker_id, zk_connect=self.zk_connect,
                properties=self.properties)
        return broker

    def started(self, broker: BrokerProcess) -> BrokerProcess:
        """What a start waits for once the broker listens (a subclass may wait for more)."""
        return broker

    def live(self) -> list[BrokerProcess]:
        return [b for b in self.brokers.values() if b.process is not None and b.process.poll() is None]

    def wire(self, broker_id: int) -> "Wire":
        return Wire(self.brokers[broker_id])

    def metadata(self, topic: str, via: int | None = None):
        """The topic's metadata from a live broker (creating the topic, as a producer would)."""
        broker = self.brokers[via] if via is not None else self.live()[0]
        with Wire(broker) as wire:
            return wire.metadata(topic)

    def wait_for(self, condition, timeout_s: float = 20.0, what: str = "condition"):
        return wait_for(condition, what, timeout_s)

    def start_all(self, count: int = 3) -> None:
        """Start brokers 0 to ``count - 1`` and wait until each sees the others."""
        brokers = [self.broker(broker_id) for broker_id in range(count)]
        for broker in brokers:  # launched together: their start-ups overlap
            broker.launch()
        for broker in brokers:
            self.started(broker.wait_listening())
        self.wait_until_all_see_each_other()

    def wait_until_all_see_each_other(self) -> None:
        """Each live broker's ZooKeeper cache lists every live broker (a topic created before
        that could not be given as many replicas)."""
        expected = {b.broker_id for b in self.live()}
        for broker in self.live():
            def sees_all(broker=broker):
                with Wire(broker) as wire:
                    return {b[0] for b in wire.metadata().brokers} == expected
            self.wait_for(sees_all, what=f"broker {broker.broker_id} to see every broker")

    def create(self, topic: str, timeout_s: float = 20.0):
        """Create ``topic`` by metadata requests (as a producer does) until every running broker
        sees it with a leader and every replica in sync; returns its metadata. Right after the
        brokers start, one may not know the others yet and refuse a factor above what it
        sees, so this asks again."""
        def settled():
            answers = []
            for broker in self.live():
                try:
                    [answer] = self.metadata(topic, via=broker.broker_id).topics
                except (OSError, ConnectionError):
                    return None
                if answer.error or not answer.partitions or any(
                        p.leader < 0 or set(p.isr) != set(p.replicas) for p in answer.partitions):
                    return None
                answers.append(answer)
            return answers[0] if len(set(answers)) == 1 else None
        return self.wait_for(settled, timeout_s, what=f"topic {topic!r} on every broker")

    def bootstrap(self) -> list[tuple[str, int]]:
        """The addresses of the brokers now running, as a client's broker list."""
        return [("127.0.0.1", b.port) for b in self.live()]

    def zk_client(self):
        """A started kazoo client inside the cluster's chroot; the caller stops it."""
        from kazoo.client import KazooClient
        client = KazooClient(hosts=self.zk_connect)
        client.start(10)
        return client

    def controller(self) -> int | None:
        """The broker id in /replication/controller, or None while there is none."""
        from kazoo.exceptions import NoNodeError
        client = self.zk_client()
        try:
            value, _ = client.get(replication_paths.CONTROLLER)
            return replication_paths.ControllerInfo.decode(value).broker_id
        except NoNodeError:
            return None
        finally:
            client.stop()
            client.close()

    def leaders(self, topic: str, via: int | None = None) -> dict[int, int]:
        return {p.partition: p.leader for p in self.metadata(topic, via).topics[0].partitions}

    def stop_all(self) -> None:
        for broker in self.brokers.values():
            broker.kill()


class Wire(WireClient):
    def __init__(self, broker: BrokerProcess, timeout_s: float = 15.0) -> None:
        super().__init__(("127.0.0.1", broker.port), timeout_s)

    @classmethod
    def at(cls, address: tuple[str, int], timeout_s: float = 15.0) -> "Wire":
        """A connection to a host and port (from a metadata answer: a restarted broker has a new port)."""
        wire = cls.__new__(cls)
        WireClient.__init__(wire, address, timeout_s)
        return wire

    def metadata(self, *topics: str):
        body = self.request(encode_replication_request(MetadataRequest(tuple(topics))))
        assert body[:2] == b"\x00\x00"
        return decode_metadata(body[2:])

    def produce(self, topic: str, partition: int, payloads: list[bytes], *, acks: int = -1,
                timeout_ms: int = 10_000) -> tuple[int, int]:
        """(error, offset) of one set appended with ``acks``."""
        request = ProduceAckRequest(acks, timeout_ms, MultiProduceRequest((
            ProduceRequest(topic, partition, encode_message_set(payloads)),)))
        body = self.request(encode_replication_request(request))
        [(_topic, _partition, error, offset)] = decode_produce_acks(body[2:])
        return error, offset

    def fetch(self, topic: str, partition: int, offset: int, max_size: int = 1 << 20) -> tuple[int, bytes]:
        body = self.request(encode_request(FetchRequest(topic, partition, offset, max_size)))
        (error,) = struct.unpack(">h", body[:2])
        return error, body[2:]

    def read_all(self, topic: str, partition: int, offset: int = 0) -> list[tuple[int, bytes]]:
        """Every visible message from ``offset``: (offset, payload)."""
        found = []
        while True:
            error, data = self.fetch(topic, partition, offset)
            assert error == 0, f"fetch error {error}"
            if not valid_bytes(data):
                return found
            for start, _next, message in iter_entries(data, offset):
                found.append((start, bytes(message.payload)))
            offset += valid_bytes(data)


@pytest.fixture
def replicated_cluster(zookeeper, tmp_path) -> Iterator[ReplicatedCluster]:
    cluster = ReplicatedCluster(tmp_path, new_chroot(zookeeper), dict(FAST))
    yield cluster
    cluster.stop_all()


@pytest.fixture
def three_brokers(replicated_cluster) -> ReplicatedCluster:
    replicated_cluster.start_all()
    return replicated_cluster


def segment_bytes(broker, topic, partition) -> bytes:
    directory = Path(broker.log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


NOT_LEADER = 6


def produce_once_led(wire, topic, partition, payloads, timeout_s: float = 20.0, **options):
    """``wire.produce`` answered by a leader that has applied its leadership: the metadata names
    a leader from ZooKeeper's state, which on a loaded machine can come a moment before the
    broker has applied it (NOT_LEADER, nothing appended); a client retries, so does this.
    Returns the answer (error, offset)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = wire.produce(topic, partition, payloads, **options)
        if answer[0] != NOT_LEADER or time.monotonic() >= deadline:
            return answer
        time.sleep(0.05)


def produce_all(cluster, topic, partition, payloads, timeout_s=20.0, via=None):
    """Produce with acks=all to whoever leads (asking broker ``via``, or any live one),
    following leader changes; returns the time of the first success."""
    deadline = time.monotonic() + timeout_s
    pending = list(payloads)
    first = None
    while pending:
        assert time.monotonic() < deadline, "no leader took the writes in time"
        try:
            leader = cluster.leaders(topic, via).get(partition)
            if leader is None or leader < 0 or leader not in {b.broker_id for b in cluster.live()}:
                time.sleep(0.05)
                continue
            with Wire(cluster.brokers[leader]) as wire:
                while pending:
                    error, _ = wire.produce(topic, partition, [pending[0]])
                    if error:
                        time.sleep(0.05)
                        break
                    first = first or time.monotonic()
                    pending.pop(0)
        except (ConnectionError, OSError):
            time.sleep(0.05)
    return first


def committed(cluster, topic, partition, via):
    with Wire(cluster.brokers[via]) as wire:
        return [p for _, p in wire.read_all(topic, partition)]


def all_in_sync(cluster, topic: str, via: int | None = None) -> bool:
    """Every partition led by a running broker with every replica in sync, as ``via`` sees it."""
    live = {b.broker_id for b in cluster.live()}
    try:
        [answer] = cluster.metadata(topic, via).topics
    except (OSError, ConnectionError):
        return False
    # a broker that has just started may answer before it has read ZooKeeper: no partitions
    return answer.error == 0 and bool(answer.partitions) and all(
        set(p.isr) == set(p.replicas) <= live and p.leader in live for p in answer.partitions)
