"""Reading a consumer group for a rebalance (client/group_assignment.py): every member's
registration as 0.7's topic counts, and this member's share, over an in-memory registry."""

from __future__ import annotations

import logging

from twisted_broker.client.group_assignment import AssignmentReader
from twisted_broker.client.topic_filter import Whitelist
from twisted_broker.registry import paths


class FakeRegistry:
    """The reads AssignmentReader makes of a ConsumerRegistry, answered from dicts."""

    def __init__(self, registrations: dict[str, bytes], partitions: dict[str, dict[str, int]]) -> None:
        self.registrations, self.partitions = registrations, partitions

    def consumer_registration(self, consumer_id: str) -> bytes | None:
        return self.registrations.get(consumer_id)

    def topics(self, *, watch: bool) -> list[str]:
        return sorted(self.partitions)

    def topic_partition_counts(self, topic: str) -> dict[str, int]:
        return self.partitions[topic]


TOPICS = {"logs": {"0": 4}, "audit": {"0": 2}}


def share(reader: AssignmentReader, registry: FakeRegistry) -> dict[tuple[str, str], str]:
    return reader.read(registry, sorted(registry.registrations)).owned


def test_members_with_filters_split_the_topics_they_allow():
    mine = Whitelist("logs,audit")
    registry = FakeRegistry({"g_a": b"*1*logs|audit", "g_b": b"*1*logs"}, TOPICS)
    owned = share(AssignmentReader("g_a", mine.subscription(1), mine), registry)
    assert owned == {("audit", "0-0"): "g_a-0", ("audit", "0-1"): "g_a-0",
                     ("logs", "0-0"): "g_a-0", ("logs", "0-1"): "g_a-0"}


def test_a_member_whose_filter_does_not_compile_here_counts_for_no_topic(caplog):
    # A Java member's \p{Alpha}: we cannot tell its topics, so it is left out (see the module
    # docstring) and the rebalance goes on instead of failing on every attempt.
    registry = FakeRegistry({"g_a": b'{"logs":1}', "g_java": b"*1*\\p{Alpha}+"}, TOPICS)
    reader = AssignmentReader("g_a", paths.StaticSubscription({"logs": 1}))
    with caplog.at_level(logging.WARNING, logger="twisted_broker.client.group_assignment"):
        assignment = reader.read(registry, ["g_a", "g_java"])
        assert reader.read(registry, ["g_a", "g_java"]) == assignment
    assert assignment.consumers == {"logs": ["g_a-0"]}
    assert assignment.owned == {("logs", f"0-{p}"): "g_a-0" for p in range(4)}
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1, warnings  # once per regex, not once per rebalance
    assert "consumer g_java registered a whitelist" in warnings[0]
    assert "\\p{Alpha}+ is an invalid regex" in warnings[0]


def test_a_blacklist_that_does_not_compile_counts_for_no_topic_rather_than_all():
    registry = FakeRegistry({"g_a": b'{"logs":1}', "g_java": b"!2!\\Qtmp\\E"}, TOPICS)
    reader = AssignmentReader("g_a", paths.StaticSubscription({"logs": 1}))
    assert reader.topic_counts("g_java", paths.decode_subscription(b"!2!\\Qtmp\\E"), list(TOPICS)) == {}
    assert reader.read(registry, ["g_a", "g_java"]).consumers == {"logs": ["g_a-0"]}


def test_a_filter_that_compiles_is_expanded_over_the_registered_topics():
    reader = AssignmentReader("g_a", paths.StaticSubscription({"logs": 1}))
    blacklist = paths.decode_subscription(b"!3!aud.*")
    assert reader.topic_counts("g_b", blacklist, ["audit", "logs"]) == {"logs": 3}
