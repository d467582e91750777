"""Where a topic's partitions are: the broker-partitions of a topic from ZooKeeper's registry
or by probing brokers, a replicated topic's partitions and their replicas, and one
SimpleConsumer per broker.

A broker list says nothing about partitions, so ``probe_partition_count`` asks the broker: a
Fetch of a partition beyond the topic's count is answered with WrongPartition (spec 2.2), so
one MultiFetch of empty fetches finds the count without reading any data. Partitions of a 0.7
topic are named as 0.7 names them, ``<broker id>-<partition>``.

A replicated topic's partition (docs/replication.md) is one partition of the topic, numbered
0..N-1, held by several brokers with the same bytes at the same offsets: it is named by its
number alone, ``<partition>`` (Kafka 0.8's naming, as the group offsets of replicated topics
under ``/consumers``), and ``ReplicatedPartition.replicas`` lists the live brokers holding
it, in the order to ask them: the leader (it has every committed message first), then the
other in-sync replicas, then the rest. Each of them serves 0.7 fetches and offsets up to its
own high watermark.

No kazoo here: ``registered_partitions`` only receives a registry view (a
twisted_broker.registry.cluster_view.ClusterView, or anything with its ``topic_brokers`` and
``brokers``), which the caller opens.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted_broker.client.replicated_topics import ReplicatedTopic
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.errors import WrongPartition
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.codec.kafka07.responses import NO_ERROR

PROBE_BATCH = 64  # partitions asked about per MultiFetch while probing a broker
PROBE_LIMIT = 4096  # a broker claiming more partitions than this is not believed


class PartitionProbeError(ValueError):
    """A broker refuses the topic, or claims more partitions than can be believed."""


@dataclass(frozen=True, order=True)
class BrokerPartition:
    """One partition of a topic on one broker, and where that broker listens."""

    broker_id: int
    partition: int
    host: str
    port: int

    @property
    def name(self) -> str:
        """0.7's partition name, ``<broker id>-<partition>``."""
        return f"{self.broker_id}-{self.partition}"

    @property
    def replicas(self) -> tuple["BrokerPartition", ...]:
        """The brokers to ask for this partition: a 0.7 partition has exactly one."""
        return (self,)


@dataclass(frozen=True, order=True)
class ReplicatedPartition:
    """One partition of a replicated topic and the live brokers holding it, in the order to
    ask them (leader, in-sync replicas, the others); ``host``/``port`` are the first's."""

    partition: int
    replicas: tuple[BrokerPartition, ...]

    @property
    def name(self) -> str:
        """``<partition>``: the same whichever replica serves it."""
        return str(self.partition)

    @property
    def broker_id(self) -> None:
        """No one broker holds the partition (the leader changes): None."""
        return None

    @property
    def host(self) -> str:
        return self.replicas[0].host

    @property
    def port(self) -> int:
        return self.replicas[0].port


def partition_name(broker_id: int | None, partition: int) -> str:
    """``<broker>-<partition>`` of a 0.7 partition, ``<partition>`` of a replicated one (None)."""
    return str(partition) if broker_id is None else f"{broker_id}-{partition}"


def replicated_partitions(topic: ReplicatedTopic) -> list[ReplicatedPartition]:
    """Every partition of ``topic`` with its live replicas (the brokers ``topic.brokers``
    lists) in the order to ask them: leader, in-sync replicas, the others. A partition none of
    whose replicas is live has none."""
    found = []
    for state in topic.partitions:
        order = dict.fromkeys([state.leader, *state.isr, *state.replicas])  # ordered, no repeats
        found.append(ReplicatedPartition(state.partition, tuple(
            BrokerPartition(broker_id, state.partition, *topic.brokers[broker_id])
            for broker_id in order if broker_id in topic.brokers)))
    return found


class ConsumerPool:
    """One SimpleConsumer per broker address, made on first use; ``close`` closes them all."""

    def __init__(self, socket_timeout_ms: int, *, connect_timeout_ms: int | None = None,
                 buffer_size: int = 65536) -> None:
        self._socket_timeout_ms = socket_timeout_ms
        self._connect_timeout_ms, self._buffer_size = connect_timeout_ms, buffer_size
        self._consumers: dict[tuple[str, int], SimpleConsumer] = {}

    def get(self, host: str, port: int, *, connect_timeout_ms: int | None = None) -> SimpleConsumer:
        """The consumer of ``host:port``; one made by this call connects within
        ``connect_timeout_ms`` (default: the pool's)."""
        consumer = self._consumers.get((host, port))
        if consumer is None:
            if connect_timeout_ms is None:
                connect_timeout_ms = self._connect_timeout_ms
            consumer = SimpleConsumer(host, port, socket_timeout_ms=self._socket_timeout_ms,
                                      buffer_size=self._buffer_size, connect_timeout_ms=connect_timeout_ms)
            self._consumers[host, port] = consumer
        return consumer

    def of(self, target: BrokerPartition) -> SimpleConsumer:
        return self.get(target.host, target.port)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()

    def __enter__(self) -> "ConsumerPool":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def registered_partitions(view, topic: str) -> list[BrokerPartition]:
    """The partitions of ``topic`` registered in ``view``'s ZooKeeper on brokers registered
    there too (live ones: both nodes are ephemeral), sorted; [] if there are none."""
    counts = view.topic_brokers(topic)
    live = view.brokers()
    return sorted(BrokerPartition(broker_id, partition, live[broker_id].host, live[broker_id].port)
                  for broker_id, count in counts.items() if broker_id in live for partition in range(count))


def probe_partition_count(consumer: SimpleConsumer, topic: str, limit: int = PROBE_LIMIT) -> int:
    """How many partitions a broker allows for ``topic`` (it may hold no data yet).

    Raises PartitionProbeError if the broker refuses the topic name or claims over ``limit``
    partitions, ConnectionError if it is down.
    """
    start = 0
    while start < limit:
        requests = [FetchRequest(topic, partition, 0, 0) for partition in range(start, start + PROBE_BATCH)]
        for request, fetched in zip(requests, consumer.multifetch(requests)):
            if fetched.error_code == WrongPartition.code:
                return request.partition
            if fetched.error_code not in (NO_ERROR, 1):  # 1: OffsetOutOfRange, the partition exists
                raise PartitionProbeError(f"broker {consumer.host}:{consumer.port} refuses topic {topic} "
                                          f"(error code {fetched.error_code})")
        start += PROBE_BATCH
    raise PartitionProbeError(f"broker {consumer.host}:{consumer.port} allows over {limit} partitions of {topic}")
