"""Creating a replicated topic through ZooKeeper, as a broker does for a producer's metadata
request (the CLI does the same through its blocking client, tools/replication_admin.py).

Like Kafka's AdminUtils, the creator places the replicas (assignment.py) and writes the
assignment; the controller sees the new node and elects the first leaders.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.assignment import AssignmentError, assign_replicas
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.registry.replication_paths import TopicAssignment
from twisted_broker.storage.topic_name import check_topic_name

LEADERS_POLL_S = 0.05


class Kafka07Topic(AssignmentError):
    """The name is a 0.7 topic's (registered under /brokers/topics): it cannot be replicated."""


def plan_topic(topic: str, *, partitions: int, replication_factor: int, live_brokers: Collection[int],
               start: int | None = None) -> TopicAssignment:
    """The assignment of a new topic. Raises InvalidTopic or AssignmentError."""
    check_topic_name(topic)
    shift = random.randrange(max(len(live_brokers), 1)) if start is None else start
    start = random.randrange(max(len(live_brokers), 1)) if start is None else start
    return TopicAssignment(assign_replicas(live_brokers, partitions=partitions,
                                           replication_factor=replication_factor, start=start, shift=shift))


@inlineCallbacks
def create_replicated_topic(zk: ZooKeeper, topic: str, *, partitions: int, replication_factor: int,
                            live_brokers: Collection[int], start: int | None = None):
    """Write a new topic's assignment; an existing replicated topic is left as it is.
    ``start``: the first partition's first replica (plan_topic). Raises AssignmentError (also
    for the name of a 0.7 topic) or InvalidTopic."""
    assignment = plan_topic(topic, partitions=partitions, replication_factor=replication_factor,
                            live_brokers=live_brokers, start=start)
    if (yield zk.exists(registry_paths.topic_path(topic))) is not None:
        raise Kafka07Topic(f"{topic!r} is a 0.7 topic (registered under {registry_paths.BROKER_TOPICS})")
    # The topic node with the parents of its partitions' state nodes, in one write: the
    # controller then creates a thousand states without a round trip each for their parents.
    ops = [("create", paths.topic_path(topic), assignment.encode(), False),
           ("create", paths.partitions_path(topic), b"", False),
           *(("create", f"{paths.partitions_path(topic)}/{partition}", b"", False) for partition in assignment.replicas)]
    for attempt in range(2):
        try:
            yield zk.transaction(ops)
            return
        except NodeExistsError:
            return
        except NoNodeError:  # the first topic of a new cluster: /replication/topics is not there yet
            if attempt:
                raise
            try:
                yield zk.create(paths.TOPICS)
            except NodeExistsError:
                pass


@inlineCallbacks
def wait_for_leaders(cluster: ClusterState, topic: str, clock, timeout_s: float):
    """Wait until every partition of ``topic`` has a state (the controller wrote it), or the
    timeout; returns whether they all have one."""
    waited = 0.0
    while waited < timeout_s:
        assignment = cluster.assignments.get(topic)
        if assignment is not None and all(cluster.state(topic, p) is not None for p in assignment.replicas):
            return True
        yield deferLater(clock, LEADERS_POLL_S, lambda: None)
        waited += LEADERS_POLL_S
    return False

