"""What one member of a consumer group should own, read from ZooKeeper: steps 1, 2 and 4 of a
rebalance (spec 5.5). The connector (client/zookeeper_consumer.py) acts on the answer.

Every member's registration is read as 0.7's ``TopicCount``: ``{topic: streams}``, a topic
filter expanded over the topics registered under ``/brokers/topics``. From those counts
registry/rebalance.py computes the same range assignment on every member.

Another member's filter regex that Python cannot compile (a Java-only construct such as
``\\p{Alpha}``; see client/topic_filter.py) counts as subscribing to no topic, logged once
per regex, instead of failing every rebalance of ours. Why this reading: 0.7's rebalance uses
other members' registrations only through their topic counts (``getConsumersPerTopic``
builds each member's ``TopicCount`` and takes its thread ids per topic), and a filter that
cannot be evaluated yields no topic we can name. It is the safe error too: counting the
member in for topics it may not consume would assign it partitions that nobody then reads,
while leaving it out at worst makes our claim collide with its own, which the rebalance
reports and retries, and every partition still has a reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from twisted_broker.client.topic_filter import TopicFilter, topic_filter_for
from twisted_broker.registry import paths, rebalance
from twisted_broker.registry.consumer_registry import ConsumerRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Assignment:
    """One member's share of its group's partitions, and what it was computed from."""

    owned: dict[tuple[str, str], str]  # (topic, partition name) -> the member's thread id
    partitions: dict[str, list[str]]  # each topic of the member's: its partitions, sorted as 0.7 does
    consumers: dict[str, list[str]]  # each topic: the thread ids of the group subscribing to it


class AssignmentReader:
    """Reads the group and computes ``consumer_id``'s share (the rebalance thread only).

    Each filter regex is compiled once per connector; ``own_filter`` is the member's own
    (None for a subscription by topic names).
    """

    def __init__(self, consumer_id: str, subscription: paths.Subscription,
                 own_filter: TopicFilter | None = None) -> None:
        self.consumer_id, self.subscription = consumer_id, subscription
        self._filters: dict[tuple[bool, str], TopicFilter | None] = {}  # None: does not compile here
        if own_filter is not None:
            self._filters[(own_filter.whitelist, own_filter.regex)] = own_filter

    def read(self, registry: ConsumerRegistry, consumer_ids: Iterable[str]) -> Assignment:
        """The share of this member among ``consumer_ids`` (which must include it). Raises
        RegistryError, or ValueError for a malformed node."""
        subscriptions = {}
        for consumer_id in consumer_ids:
            value = registry.consumer_registration(consumer_id)
            if value is not None:  # None: it just left, and its watch has fired
                subscriptions[consumer_id] = paths.decode_subscription(value)
        subscriptions[self.consumer_id] = self.subscription
        watch_topics = isinstance(self.subscription, paths.WildcardSubscription)
        topics = (registry.topics(watch=watch_topics)
                  if any(isinstance(s, paths.WildcardSubscription) for s in subscriptions.values()) else [])
        topic_counts = {consumer_id: self.topic_counts(consumer_id, subscription, topics)
                        for consumer_id, subscription in subscriptions.items()}
        # Steps 1-2 and 4: every member's threads per topic, our topics' partitions, our share.
        my_threads = rebalance.thread_ids_per_topic(self.consumer_id, topic_counts[self.consumer_id])
        consumers = rebalance.consumers_per_topic(topic_counts)
        partitions = {topic: self.partition_names(registry, topic) for topic in my_threads}
        return Assignment(rebalance.owned_partitions(my_threads, consumers, partitions), partitions, consumers)

    @staticmethod
    def partition_names(registry: ConsumerRegistry, topic: str) -> list[str]:
        """The topic's partition names, sorted as strings: 0.7's ``<b>-<p>`` from
        /brokers/topics, or a replicated topic's ``0``..``N-1`` from /replication/topics."""
        counts = registry.topic_partition_counts(topic)
        if counts:
            return rebalance.partition_names(counts)
        return sorted(str(p) for p in range(registry.replicated_partition_count(topic)))

    def topic_counts(self, consumer_id: str, subscription: paths.Subscription, topics: list[str]) -> dict[str, int]:
        """0.7's TopicCount of ``consumer_id``'s registration: ``{topic: streams}``; empty
        for a filter that does not compile here (see the module docstring)."""
        if isinstance(subscription, paths.StaticSubscription):
            return dict(subscription.topic_counts)
        topic_filter = self._filter(subscription, consumer_id)
        if topic_filter is None:
            return {}
        return {topic: subscription.streams for topic in topics if topic_filter.is_topic_allowed(topic)}

    def _filter(self, subscription: paths.WildcardSubscription, consumer_id: str) -> TopicFilter | None:
        key = (subscription.whitelist, subscription.regex)
        if key not in self._filters:
            try:
                self._filters[key] = topic_filter_for(subscription)
            except ValueError as exc:  # never our own: it was compiled when it was made
                log.warning("consumer %s registered a %s that cannot be used here, so it counts as "
                            "subscribing to no topic: %s", consumer_id,
                            "whitelist" if subscription.whitelist else "blacklist", exc)
                self._filters[key] = None
        return self._filters[key]
