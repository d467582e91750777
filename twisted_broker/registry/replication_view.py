"""ReplicationView: the command line's blocking reads and writes of ``/replication``.

A ClusterView (same session, same errors: ZooKeeperUnavailable) that also reads replicated
topics' assignments and partition states, creates a topic's assignment, and writes the admin
requests the controller carries out (docs/replication.md §2). Values go through
registry/replication_paths.py's codecs; a value that does not decode raises ValueError naming its path.
Every write is a ``create``: a node that exists already is reported (False), never
overwritten, so a tool cannot replace a topic or a request that is still pending.
"""

from __future__ import annotations

from kazoo.exceptions import NodeExistsError

from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.cluster_view import ClusterView
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment


class ReplicationView(ClusterView):
    """ClusterView plus replication's nodes. Blocking; one thread at a time."""

    def replicated_topics(self) -> list[str]:
        """Every topic with an assignment under /replication/topics, sorted."""
        return sorted(self._children(paths.TOPICS))

    def is_07_topic(self, topic: str) -> bool:
        """Whether ``topic`` is registered the 0.7 way (/brokers/topics/<t> exists)."""
        return self._call(lambda: self._client.exists(registry_paths.topic_path(topic))) is not None

    def assignment(self, topic: str) -> TopicAssignment | None:
        """The topic's replica lists, or None when it is not a replicated topic."""
        value = self._data(paths.topic_path(topic))
        return None if value is None else _decoded(TopicAssignment.decode, value, paths.topic_path(topic))

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """Leader, epoch and ISR, or None before the controller wrote the first state."""
        path = paths.state_path(topic, partition)
        value = self._data(path)
        return None if value is None else _decoded(PartitionState.decode, value, path)

    def create_topic(self, topic: str, assignment: TopicAssignment) -> bool:
        """Write a new replicated topic's assignment; False if the topic exists already."""
        return self._create(paths.topic_path(topic), assignment.encode())

    def admin_request(self, path: str) -> bytes | None:
        """The pending admin request at ``path`` (paths.REASSIGN_PARTITIONS or
        paths.PREFERRED_REPLICA_ELECTION), or None once the controller deleted it (done)."""
        return self._data(path)

    def create_admin_request(self, path: str, value: bytes) -> bool:
        """Write an admin request; False (and nothing written) if one is pending there."""
        return self._create(path, value)

    def _create(self, path: str, value: bytes) -> bool:
        def create() -> bool:
            try:
                self._client.create(path, value, makepath=True)
            except NodeExistsError:
                return False
            return True

        return self._call(create)


def _decoded(decode, value: bytes, path: str):
    try:
        return decode(value)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
