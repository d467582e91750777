"""What one console user may see and do: the ACLs' decisions (docs/security.md, "The console
follows the ACLs"), and the registry as that user sees it.

``ConsoleAccess`` asks the authorizer (security/authorizer.py) for the user's principal and
the browser's address: Describe on a topic or a group to see it, Alter on a group for the
offset reset, Describe on the Cluster for ``/metrics``. ``everything`` (no authorizer, no
login, or a super user) skips every check and filter, so the pages are built as before.

``VisibleCluster`` stands in for the ClusterCache in the views: the same questions, with the
topics and groups the user may not describe left out. It caches nothing of its own, so no
user's view is ever served to another (the cache's ``memo`` is per registry, not per user).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from twisted_broker.security.acl import CLUSTER_NAME, Operation, ResourceType


class ConsoleAccess:
    """The decisions for ``principal`` from ``host``; ``authorizer`` None: the ACLs are off."""

    def __init__(self, authorizer, principal: str | None, host: str) -> None:
        self._authorizer, self.principal, self._host = authorizer, principal, host
        self.everything = (authorizer is None or principal is None
                           or principal in authorizer.super_users)

    def _allows(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.everything or self._authorizer.authorize(self.principal, self._host, operation,
                                                             resource_type, name)

    def may_describe_topic(self, topic: str) -> bool:
        return self._allows(Operation.DESCRIBE, ResourceType.TOPIC, topic)

    def may_describe_group(self, group: str) -> bool:
        return self._allows(Operation.DESCRIBE, ResourceType.GROUP, group)

    def may_alter_group(self, group: str) -> bool:
        return self._allows(Operation.ALTER, ResourceType.GROUP, group)

    def may_describe_cluster(self) -> bool:
        return self._allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)


EVERYTHING = ConsoleAccess(None, None, "")


class VisibleCluster:
    """``cluster`` (a ClusterCache or LocalCluster) as ``access`` may see it."""

    def __init__(self, cluster, access: ConsoleAccess) -> None:
        self._cluster, self._access = cluster, access

    def __getattr__(self, name: str):  # brokers, controller, synced, zk_connect...: as they are
        return getattr(self._cluster, name)

    def memo(self, key: str, compute):
        return compute()

    def topics(self) -> list[str]:
        return [t for t in self._cluster.topics() if self._access.may_describe_topic(t)]

    def all_topics(self) -> list[str]:
        return [t for t in self._cluster.all_topics() if self._access.may_describe_topic(t)]

    def replicated_topics(self) -> list[str]:
        return [t for t in self._cluster.replicated_topics() if self._access.may_describe_topic(t)]

    def topic_brokers(self, topic: str) -> dict[int, int]:
        return self._cluster.topic_brokers(topic) if self._access.may_describe_topic(topic) else {}

    def replicated_topic(self, topic: str):
        return self._cluster.replicated_topic(topic) if self._access.may_describe_topic(topic) else None

    def modern_partitions(self, topic: str) -> dict[str, int]:
        return self._cluster.modern_partitions(topic) if self._access.may_describe_topic(topic) else {}

    def broker_topics(self, broker_id: int) -> dict[str, int]:
        return {t: n for t, n in self._cluster.broker_topics(broker_id).items() if self._access.may_describe_topic(t)}

    def partition_count(self) -> int:
        return sum(sum(self._cluster.topic_brokers(t).values()) for t in self.topics())

    def groups(self) -> list[str]:
        return [g for g in self._cluster.groups() if self._access.may_describe_group(g)]

    def group(self, group: str):
        """The group's state with only the topics the user may describe; None without Describe."""
        state = self._cluster.group(group) if self._access.may_describe_group(group) else None
        if state is None:
            return None
        seen = self._access.may_describe_topic
        return replace(state, offsets={t: o for t, o in state.offsets.items() if seen(t)},
                       owners={t: o for t, o in state.owners.items() if seen(t)})

    def consumer_count(self) -> int:
        return sum(len(state.consumers) for g in self.groups() if (state := self.group(g)) is not None)


def visible_snapshot(snapshot: dict[str, Any] | None, access: ConsoleAccess) -> dict[str, Any] | None:
    """An embedded broker's statistics (server.stats.broker_snapshot) with the topics the
    user may not describe left out."""
    if snapshot is None or access.everything:
        return snapshot
    seen = access.may_describe_topic
    return {**snapshot, "topics": {t: figures for t, figures in snapshot["topics"].items() if seen(t)},
            "logs": [entry for entry in snapshot["logs"] if seen(entry["topic"])]}


def visible_replication(figures: dict[str, Any] | None, access: ConsoleAccess) -> dict[str, Any] | None:
    """A broker's replication figures (server.stats.replication_snapshot), its replicas of
    topics the user may not describe left out."""
    if figures is None or access.everything or "replicas" not in figures:
        return figures
    return {**figures, "replicas": [r for r in figures["replicas"] if access.may_describe_topic(r["topic"])]}
