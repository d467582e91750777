"""Replicas whose log failed on this broker's disk (issue 22, defect 4; Kafka's KIP-112).

A failed fsync leaves a log refusing every append; a full disk fails each append. A leader in
that state would keep its leadership and refuse every write while an in-sync follower could
take them, and a follower would fall behind without saying why. So a replica whose log fails
is given up at once: it stops leading or following for the rest of this process's life, and
the broker lists it in its ephemeral ``/replication/offline_replicas/<id>`` node; the
controller then elects another in-sync replica and keeps this broker out of the partition's
ISR while the node lists it. The broker goes on serving the partitions it can. A restart (after
the disk is repaired) clears the node with the session, and the replica catches up as any
restarted follower does.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionMove
from twisted_broker.registry.zookeeper import NodeExistsError, ZooKeeper
from twisted_broker.storage.log import Log

log = logging.getLogger(__name__)


def log_failure(log_: Log) -> OSError | None:
    """The disk error that makes ``log_`` unusable for replication, or None."""
    return log_.write_error or log_.append_error


class OfflineReplicas:
    """The partitions given up on this broker, and the node that tells the controller."""

    def __init__(self, *, broker_id: int, zk: ZooKeeper) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self.partitions: set[tuple[str, int]] = set()

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self.partitions

    def add(self, topic: str, partition: int, error: OSError) -> None:
        log.error("%s-%d: its log failed on this broker's disk (%s): giving the replica up; the controller "
                  "moves its leadership to another in-sync replica", topic, partition, error)
        self.partitions.add((topic, partition))
        self.publish()

    @inlineCallbacks
    def publish(self):
        """Write the node (again after a new session: it is ephemeral). A failure is logged;
        the next resync writes it again."""
        if not self.partitions:
            return
        path = paths.offline_replicas_path(self.broker_id)
        value = paths.encode_partition_list([PartitionMove(t, p, ()) for t, p in sorted(self.partitions)],
                                            with_replicas=False)
        try:
            try:
                yield self._zk.create(path, value, ephemeral=True)
            except NodeExistsError:
                yield self._zk.set(path, value)
        except Exception as exc:
            log.warning("could not write %s: %s", path, exc)
