"""Metadata, CreateTopics and DeleteTopics of the modern listener (docs/kafka-protocol.md §4).

Topics are created as the rest of the broker creates them: with replication factor 1 and
the broker's own partition count, a 0.7 topic (its logs here, registered under
``/brokers/topics`` by the broker's registration, so 0.7 tools and clients find it); any
other factor or count, a replicated topic through ZooKeeper and the controller
(replication/admin.py). A Metadata request for an unknown topic creates it with
``num.partitions`` and ``default.replication.factor`` when ``auto.create.topics.enable``
and the request (v4+) allow it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from twisted.internet.defer import gatherResults, inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.errors import PartitionNotReady
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.zookeeper import NoNodeError
from twisted_broker.registry import replication_paths
from twisted_broker.replication.admin import Kafka07Topic, create_replicated_topic, wait_for_leaders
from twisted_broker.replication.assignment import AssignmentError
from twisted_broker.handlers.kafka.topics import KafkaClusterView, TopicView, is_valid_topic_name

log = logging.getLogger(__name__)

CREATION_WAIT_S = 5.0  # for the first leaders of a replicated topic a Metadata request created
POLL_S = 0.1


class TopicRequests:
    """Handlers of Metadata (3), CreateTopics (19) and DeleteTopics (20)."""

    def __init__(self, view: KafkaClusterView, *, num_partitions: int, default_replication_factor: int,
                 auto_create: bool, clock) -> None:
        self.view = view
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        self.auto_create = auto_create
        self.clock = clock
        # Whether a Metadata request may create an unknown topic, besides auto.create.topics.enable:
        # the authorizer's say (Create on the cluster or the topic), when it is on.
        self.may_create: Callable[[Request, str], bool] = lambda request, name: True

    # -- Metadata -----------------------------------------------------------------------------

    @inlineCallbacks
    def metadata(self, request: Request):
        body = request.body
        names = body["topics"]
        if request.api_version == 0 and not names:
            names = None  # v0: an empty list asks for every topic
        create = self.auto_create and body.get("allow_auto_topic_creation", True)
        yield self.wait_for_cluster()
        if names is None:
            names = yield self.view.topic_names()
        else:
            names = list(dict.fromkeys(topic["name"] for topic in names))
        brokers = yield self.view.brokers(request.listener)
        topics = []
        for name in names:
            if not is_valid_topic_name(name):
                topics.append({"error_code": kafka_errors.INVALID_TOPIC_EXCEPTION, "name": name,
                               "is_internal": False, "partitions": []})
                continue
            error, view = kafka_errors.NONE, (yield self.view.topic(name))
            if view is None and create and not self.may_create(request, name):
                error = kafka_errors.TOPIC_AUTHORIZATION_FAILED
            elif view is None and create:
                error = yield self._create(name, self.num_partitions, self.default_replication_factor,
                                           CREATION_WAIT_S)
                view = (yield self.view.topic(name)) if error == kafka_errors.NONE else None
            if view is None:
                topics.append({"error_code": error or kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                               "is_internal": False, "partitions": []})
                continue
            topics.append(_topic_metadata(view, brokers))
        return {"throttle_time_ms": 0,
                "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}
                            for node, (host, port) in sorted(brokers.items())],
                "cluster_id": None, "controller_id": self.view.controller_id(), "topics": topics}

    @inlineCallbacks
    def wait_for_cluster(self):
        """Just started: wait (a few seconds at most) until ZooKeeper has been read and a
        controller elected, so that existing topics are not taken for unknown and the
        answer names a live controller (some clients send CreateTopics only to it)."""
        cluster, waited = self.view.cluster, 0.0
        while cluster is not None and not (cluster.synced and self.view.controller_id() >= 0) \
                and waited < CREATION_WAIT_S:
            yield deferLater(self.clock, POLL_S, lambda: None)
            waited += POLL_S

    # -- CreateTopics / DeleteTopics -------------------------------------------------------------

    def create_topics(self, request: Request):
        """Every topic of the request at once: their assignments are written together and
        their leaders awaited together, so a hundred topics take about as long as one (one
        after another, waiting for each one's leaders, they outlasted the client's timeout:
        issue 23)."""
        body = request.body
        wait_s = max(body.get("timeout_ms", 0), 0) / 1000
        answers = gatherResults([self._create_one(topic, wait_s, bool(body.get("validate_only")))
                                 for topic in body["topics"]], consumeErrors=True)
        return answers.addCallback(lambda topics: {"throttle_time_ms": 0, "topics": topics})

    @inlineCallbacks
    def _create_one(self, topic: dict, wait_s: float, validate_only: bool):
        name = topic["name"]
        partitions, factor = topic["num_partitions"], topic["replication_factor"]
        error, message = kafka_errors.NONE, None
        if topic.get("assignments"):
            error, message = kafka_errors.INVALID_REQUEST, "manual replica assignments are not supported"
        elif partitions < 1:
            error, message = kafka_errors.INVALID_PARTITIONS, f"{partitions} partitions"
        elif factor < 1:
            error, message = kafka_errors.INVALID_REPLICATION_FACTOR, f"replication factor {factor}"
        elif (yield self.view.topic(name)) is not None:
            error, message = kafka_errors.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        elif validate_only:
            error = _name_error(name)
        else:
            error = yield self._create(name, partitions, factor, wait_s)
        if error and message is None:
            message = kafka_errors.error_name(error)
        return {"name": name, "error_code": error, "error_message": message}

    @inlineCallbacks
    def delete_topics(self, request: Request):
        answers = []
        for name in request.body["topic_names"]:
            view = yield self.view.topic(name)
            if view is None:
                error = kafka_errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                error = yield self._delete(view)
            answers.append({"name": name, "error_code": error})
        return {"throttle_time_ms": 0, "responses": answers}

    # -- creating and deleting -----------------------------------------------------------------

    @inlineCallbacks
    def _create(self, name: str, partitions: int, factor: int, wait_s: float):
        """Create a topic; returns the Kafka error code (NONE once it exists)."""
        error = _name_error(name)
        if error:
            return error
        view = self.view
        if factor == 1 and partitions == view.partitions_for(name) or view.zk is None:
            if factor != 1 or partitions != view.partitions_for(name):
                log.warning("cannot create %r with %d partitions and factor %d without ZooKeeper", name, partitions,
                            factor)
                return kafka_errors.INVALID_REPLICATION_FACTOR if factor != 1 else kafka_errors.INVALID_PARTITIONS
            try:  # a 0.7 topic: its logs, here; the registration lists it under /brokers/topics
                for partition in range(partitions):
                    view.logs.get_or_create_log(name, partition)
            except OSError as exc:
                log.error("creating topic %r failed: %s", name, exc)
                return kafka_errors.KAFKA_STORAGE_ERROR
            except PartitionNotReady:  # replication's state not read yet: ask again
                return kafka_errors.LEADER_NOT_AVAILABLE
            return kafka_errors.NONE
        try:
            yield create_replicated_topic(view.zk, name, partitions=partitions, replication_factor=factor,
                                          live_brokers=view.cluster.brokers)
        except Kafka07Topic:
            return kafka_errors.TOPIC_ALREADY_EXISTS
        except AssignmentError as exc:
            log.warning("cannot create replicated topic %r: %s", name, exc)
            return kafka_errors.INVALID_REPLICATION_FACTOR
        yield wait_for_leaders(view.cluster, name, self.clock, wait_s)
        return kafka_errors.NONE

    @inlineCallbacks
    def _delete(self, view: TopicView):
        """Delete a topic: a replicated one's assignment (every replica then deletes its log),
        or a 0.7 topic's logs on this broker and its registration here."""
        zk = self.view.zk
        try:
            if view.replicated:
                yield delete_tree(zk, replication_paths.topic_path(view.name))
                return kafka_errors.NONE
            for partition in [p.local_partition for p in view.partitions if p.leader == self.view.broker_id]:
                self.view.logs.delete_log(view.name, partition)
            if zk is not None:
                yield delete_tree(zk, registry_paths.broker_topic_path(view.name, self.view.broker_id))
        except OSError as exc:
            log.error("deleting topic %r failed: %s", view.name, exc)
            return kafka_errors.KAFKA_STORAGE_ERROR
        return kafka_errors.NONE


def _name_error(name: str) -> int:
    return kafka_errors.NONE if is_valid_topic_name(name) else kafka_errors.INVALID_TOPIC_EXCEPTION


def _topic_metadata(view: TopicView, brokers: dict) -> dict:
    partitions = []
    for p in view.partitions:
        # A leader whose modern listener is unknown (kafka.port=0 there) is no leader to a client.
        leader = p.leader if p.leader in brokers else -1
        partitions.append({
            "error_code": kafka_errors.NONE if leader >= 0 else kafka_errors.LEADER_NOT_AVAILABLE,
            "partition_index": p.partition, "leader_id": leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
            "offline_replicas": [r for r in p.replicas if r not in brokers]})
    return {"error_code": kafka_errors.NONE, "name": view.name, "is_internal": False, "partitions": partitions}


@inlineCallbacks
def delete_tree(zk, path: str):
    """Delete ``path`` and everything under it (children first); a missing node is no error."""
    try:
        children = yield zk.get_children(path)
    except NoNodeError:
        return
    for child in children:
        yield delete_tree(zk, f"{path}/{child}")
    try:
        yield zk.delete(path)
    except NoNodeError:
        pass
