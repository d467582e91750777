"""Brokers with the modern listener for today's Kafka clients (tests/kafka_clients).

``ModernBroker`` is one ``twistd -n broker`` with ``kafka.port`` on a free loopback port and
two partitions per new topic (so that two group members have one each); ``ModernCluster`` is
three such brokers (tests/support/replicated_cluster.py's) with replication factor 3, each
keeping its ``kafka.port`` across restarts. A listener that does not answer ApiVersions within
``LISTEN_TIMEOUT_S`` fails the test that started it, naming the port.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.kafka_clients.kafka_frames import Connection, api_versions, decode_metadata_v1, metadata_v1
from tests.support.polling import wait_for
from tests.support.replicated_cluster import ReplicatedCluster

LISTEN_TIMEOUT_S = 10.0
MODERN_PROPERTIES = {"num.partitions": "2", "log.flush.interval": "1"}


def free_port() -> int:
    """A loopback port nobody listens on now (the broker binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_listener(broker: BrokerProcess, kafka_port: int, timeout_s: float = LISTEN_TIMEOUT_S
                      ) -> dict[int, tuple[int, int]] | None:
    """The listener's ApiVersions answer once ``kafka_port`` answers; None if it never opens."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker.process.poll() is not None:
            raise RuntimeError(f"broker exited with {broker.process.returncode}\n{broker.log_tail()}")
        try:
            return api_versions(kafka_port)
        except (ConnectionError, OSError):
            time.sleep(0.1)
    return None


class ModernBroker:
    """A broker process with its modern listener: ``bootstrap`` is what clients are given."""

    def __init__(self, broker: BrokerProcess, kafka_port: int, apis: dict[int, tuple[int, int]]) -> None:
        self.process, self.kafka_port, self.apis = broker, kafka_port, apis

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def port(self) -> int:
        """The 0.7 port."""
        return self.process.port

    def serves(self, *api_keys: int) -> bool:
        return all(key in self.apis for key in api_keys)

    def log_tail(self, max_bytes: int = 6000) -> str:
        return self.process.log_tail(max_bytes)


def start_modern(directory, *, zk_connect: str | None, broker_id: int = 0,
                 properties: dict[str, str] | None = None) -> ModernBroker:
    kafka_port = free_port()
    broker = BrokerProcess(directory, broker_id=broker_id, zk_connect=zk_connect, properties={
        **MODERN_PROPERTIES, **(properties or {}), "kafka.port": str(kafka_port)}).start()
    apis = wait_for_listener(broker, kafka_port)
    if apis is None:
        broker.kill()
        pytest.fail(f"kafka.port={kafka_port} opened no listener that answers ApiVersions v0 "
                    f"within {LISTEN_TIMEOUT_S:.0f} s\n{broker.log_tail()}")
    return ModernBroker(broker, kafka_port, apis)


def metadata(broker: ModernBroker, topics: list[str] | None = None) -> dict:
    """A Metadata v1 answer of ``broker`` (decode_metadata_v1); asking for a topic creates it."""
    with Connection(broker.kafka_port) as connection:
        return decode_metadata_v1(connection.request(metadata_v1(11, topics)))


def create_topic(broker: ModernBroker, topic: str, timeout_s: float = 10.0) -> int:
    """Create ``topic`` as clients do (a Metadata request naming it) and wait until every
    partition has a leader; return the partition count."""
    def ready():
        error, partitions = metadata(broker, [topic])["topics"].get(topic, (-1, {}))
        return not error and partitions and all(p[1] >= 0 for p in partitions.values()) and len(partitions)
    return wait_for(ready, f"topic {topic} with leaders", timeout_s)


class ModernCluster(ReplicatedCluster):
    """Three brokers (tests/replication's cluster), each with ``kafka.port`` of its own that it
    keeps across restarts, so clients find a restarted broker where metadata says it is."""

    def __init__(self, root, zk_connect: str, properties: dict[str, str]) -> None:
        super().__init__(root, zk_connect, properties)
        self.kafka_ports: dict[int, int] = {}
        self.apis: dict[int, tuple[int, int]] = {}

    def broker(self, broker_id: int) -> BrokerProcess:
        kafka_port = self.kafka_ports.setdefault(broker_id, free_port())
        if broker_id not in self.brokers:
            self.brokers[broker_id] = BrokerProcess(
                self.root / f"broker-{broker_id}", broker_id=broker_id, zk_connect=self.zk_connect,
                properties={**self.properties, "kafka.port": str(kafka_port)})
        return self.brokers[broker_id]

    def started(self, broker: BrokerProcess) -> BrokerProcess:
        kafka_port = self.kafka_ports[broker.broker_id]
        apis = wait_for_listener(broker, kafka_port)
        if apis is None:
            self.stop_all()
            pytest.fail(f"kafka.port={kafka_port} of broker {broker.broker_id} opened no listener that answers "
                        f"ApiVersions v0 within {LISTEN_TIMEOUT_S:.0f} s\n{broker.log_tail()}")
        self.apis = apis
        return broker

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_ports[b.broker_id]}" for b in self.live())
