"""A consumer group member's calls into ZooKeeper besides reading the group (group_assignment.py).

**Owner nodes** (OwnedPartitions; spec 5.5, step 5): its whole share, or nothing. A rebalance claims the partitions of its share by creating the ephemeral nodes
``/consumers/<g>/owners/<t>/<p>`` (registry/consumer_registry.py). If another member still
owns one, the attempt deletes the nodes it created and fails, to be tried again after
``rebalance.backoff.ms``: a member never fetches part of its share while another fetches the
rest. Only the rebalance thread of client/zookeeper_consumer.py calls these (and its
shutdown, holding the same lock).

**The fetcher threads' lookups** (FetcherLookups; client/consumer_fetcher.py's callables): a
broker's address, the live brokers, a reset offset written. Each logs a failure and answers
"not now", so a fetcher thread tries again instead of dying.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from twisted_broker.client.consumer_stream import PartitionTopicInfo
from twisted_broker.registry.consumer_registry import ConsumerRegistry, RegistryError

# The connector's logger: these lines were always its, and operators filter by it.
log = logging.getLogger("twisted_broker.client.zookeeper_consumer")

PartitionKey = tuple[str, str]  # (topic, partition name: "<broker>-<partition>", or "<partition>")


class OwnedPartitions:
    """The owner nodes this member holds, each with the consumer thread id written in it."""

    def __init__(self, registry: ConsumerRegistry) -> None:
        self._registry = registry
        self.threads: dict[PartitionKey, str] = {}

    def claim_all(self, decision: Mapping[PartitionKey, str]) -> tuple[str, str, str] | None:
        """Own every partition of ``decision`` (``{(topic, partition): thread id}``), in order.

        Returns None once all are owned; else ``(thread id, topic, partition)`` of the first one
        another consumer still owns, after releasing every node held. Raises RegistryError.
        """
        for (topic, partition), thread in sorted(decision.items()):
            if not self._registry.claim(topic, partition, thread):
                self.release_all()
                return thread, topic, partition
            self.threads[(topic, partition)] = thread
        return None

    def release_all(self) -> None:
        """Delete the owner nodes held. Raises RegistryError; the nodes not yet deleted stay
        listed and are released by the next attempt."""
        for (topic, partition), thread in sorted(self.threads.items()):
            self._registry.release(topic, partition, thread)
            del self.threads[(topic, partition)]

    def forget(self) -> None:
        """The ZooKeeper session expired, and its ephemeral owner nodes with it: hold nothing."""
        self.threads = {}


class FetcherLookups:
    """What the fetcher threads ask of ZooKeeper; any thread."""

    def __init__(self, registry: ConsumerRegistry) -> None:
        self._registry = registry

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        try:
            return self._registry.broker_address(broker_id)
        except RegistryError as exc:
            log.warning("looking up broker %d failed: %s", broker_id, exc)
            return None

    def live_brokers(self) -> list[tuple[int, tuple[str, int]]]:
        """The registered brokers, to ask where replicated partitions lead ([] if ZooKeeper
        cannot say now: the fetcher tries again)."""
        try:
            return list(self._registry.brokers().items())
        except RegistryError as exc:
            log.warning("listing the brokers failed: %s", exc)
            return []

    def write_reset_offset(self, info: PartitionTopicInfo, offset: int) -> None:
        try:
            self._registry.write_offset(info.topic, info.partition, offset)
            info.committed_offset = offset
        except RegistryError as exc:
            log.warning("writing the reset offset %d of %s:%s failed: %s", offset, info.topic, info.partition, exc)
