"""A replicated cluster's registry at scale, written straight into ZooKeeper: what the console
and the CLI read of a cluster of a thousand topics, without starting one (issue 23's item 6).

``ScaleLayout`` says what the registry holds: brokers 0..N-1, topics ``scale-0000``... of P
partitions each at factor R, replicas placed round robin (the preferred leader first), a
controller, and each partition's state. It is deterministic: every 10th partition (number 3
mod 10 across the cluster) is under-replicated (its last replica out of the ISR), every 50th
(7 mod 50) is offline (leader -1). ``broker_figures`` counts what the console's broker table
says of each broker, from the layout alone.

``write_registry`` writes it with kazoo in the registry's real paths and values
(registry/paths.py, registry/replication_paths.py): one ZooKeeper transaction per topic, all
in flight together, so 1,000 topics take about a second. The brokers' registrations are
persistent nodes (no broker runs): the tests and bench/console_scale.py delete the chroot or
the server when done.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted_broker.registry import paths, replication_paths
from twisted_broker.registry.replication_paths import NO_LEADER, ControllerInfo, PartitionState, TopicAssignment

CONTROLLER_EPOCH = 3


@dataclass(frozen=True)
class ScaleLayout:
    topics: int
    partitions: int = 1
    brokers: int = 5
    factor: int = 3
    prefix: str = "scale-"

    def topic(self, index: int) -> str:
        return f"{self.prefix}{index:04d}"

    def topic_names(self) -> list[str]:
        return [self.topic(index) for index in range(self.topics)]

    def replicas(self, index: int, partition: int) -> tuple[int, ...]:
        first = (index * self.partitions + partition) % self.brokers
        return tuple((first + step) % self.brokers for step in range(self.factor))

    def state(self, index: int, partition: int) -> PartitionState:
        number = index * self.partitions + partition
        replicas = self.replicas(index, partition)
        if number % 50 == 7:
            return PartitionState(NO_LEADER, 2, replicas[:1], CONTROLLER_EPOCH)
        isr = replicas[:-1] if number % 10 == 3 and len(replicas) > 1 else replicas
        return PartitionState(replicas[0], 1, isr, CONTROLLER_EPOCH)

    def broker_figures(self) -> dict[int, dict[str, int]]:
        """``{broker: {"replicas", "leaderships", "under_replicated"}}``: replicas it holds,
        partitions it leads, and those of them whose ISR is smaller than their replicas."""
        figures = {b: {"replicas": 0, "leaderships": 0, "under_replicated": 0} for b in range(self.brokers)}
        for index in range(self.topics):
            for partition in range(self.partitions):
                replicas, state = self.replicas(index, partition), self.state(index, partition)
                for broker in replicas:
                    figures[broker]["replicas"] += 1
                if state.online:
                    figures[state.leader]["leaderships"] += 1
                    figures[state.leader]["under_replicated"] += len(state.isr) < len(replicas)
        return figures

    def counts(self) -> dict[str, int]:
        """The cluster's partitions, under-replicated and offline partitions."""
        states = [self.state(i, p) for i in range(self.topics) for p in range(self.partitions)]
        return {"partitions": len(states), "offline": sum(not s.online for s in states),
                "under_replicated": sum(s.online and len(s.isr) < self.factor for s in states)}


def write_registry(client, layout: ScaleLayout, *, port: int = 9092, timeout_s: float = 60.0) -> None:
    """Write ``layout`` through ``client`` (a started KazooClient, in its chroot)."""
    for path in (paths.BROKER_IDS, replication_paths.TOPICS):
        client.ensure_path(path)
    for broker in range(layout.brokers):
        info = paths.BrokerInfo(broker, f"scale-{broker}", "127.0.0.1", port + broker)
        client.create(f"{paths.BROKER_IDS}/{broker}", info.encode())
    client.create(replication_paths.CONTROLLER, ControllerInfo(0, CONTROLLER_EPOCH).encode())
    pending = []
    for index, topic in enumerate(layout.topic_names()):
        assignment = TopicAssignment({p: layout.replicas(index, p) for p in range(layout.partitions)})
        transaction = client.transaction()
        transaction.create(replication_paths.topic_path(topic), assignment.encode())
        transaction.create(replication_paths.partitions_path(topic))
        for partition in range(layout.partitions):
            state = replication_paths.state_path(topic, partition)
            transaction.create(state.removesuffix("/state"))
            transaction.create(state, layout.state(index, partition).encode())
        pending.append(transaction.commit_async())
    for result in pending:
        failed = [r for r in result.get(timeout_s) if isinstance(r, Exception)]
        if failed:
            raise failed[0]
