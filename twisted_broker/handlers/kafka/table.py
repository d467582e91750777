"""The modern listener's table of handlers, one per api key, built from the broker's parts.

tap.py calls ``modern_broker`` once, with the parts it picked; every handler is a bound
method of one of the request classes of this package (fetch, produce, metadata, groups), so
grep finds each from its api key here.

The listener (network/kafka.py) decodes each frame with ``twisted_broker.codec.kafka``, calls
the handler of its api key with the ``Request``, and frames what it returns: the response body
(a dict for the schema walker), a ``WithRecords`` (a body with file regions in its record
sets, which stream from their segments) or ``None`` (a produce with acks=0: no answer), or a
Deferred of one of those (long-polls, acks=all, ZooKeeper).

What is refused, and how (docs/kafka-protocol.md §7): an ApiVersions request of a version
this broker does not serve (handed on with ``body`` None) is answered with error 35 in the
v0 layout, listing the versions it does serve, so the client can retry with one (KIP-511);
the listener closes the connection for any other unknown key or version, and any body that
does not decode to its end.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted_broker.config import BrokerConfig
from twisted_broker.coordinator.group.coordinator import GroupCoordinator
from twisted_broker.codec.kafka import api_keys
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.api_keys import API_VERSIONS, SUPPORTED
from twisted_broker.codec.kafka.protocol import REQUESTS, Request
from twisted_broker.handlers.kafka.acls import AclRequests
from twisted_broker.handlers.kafka.authorization import Authorization
from twisted_broker.handlers.kafka.fetch import FetchRequests
from twisted_broker.handlers.kafka.groups import GroupRequests
from twisted_broker.handlers.kafka.metadata import TopicRequests
from twisted_broker.handlers.kafka.partitions import PartitionFinder
from twisted_broker.handlers.kafka.produce import ProduceRequests
from twisted_broker.handlers.kafka.quotas import QuotaChecks
from twisted_broker.handlers.kafka.sasl import SaslRequests
from twisted_broker.handlers.kafka.topics import KafkaClusterView
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.security.acl import Operation, ResourceType
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.server.stats import BrokerStats
from twisted_broker.storage.log_manager import LogManager


Handler = Callable[[Request], object]


class ModernBroker:
    """The modern protocol's handlers: ``handlers`` maps api key -> handler, ApiVersions
    included. ``stats`` is a BrokerStats sharing the topics' figures with the 0.7 broker but
    with request figures of its own (request types of the two protocols share numbers)."""

    def __init__(self, stats: BrokerStats, handlers: dict[int, Handler]) -> None:
        self.stats = stats
        self.handlers = {API_VERSIONS: self._api_versions, **handlers}
        unknown = set(self.handlers) - set(SUPPORTED)
        if unknown:
            raise ValueError(f"handlers for api keys not in the supported table: {sorted(unknown)}")
        self.api_keys = frozenset(self.handlers)  # what the listener decodes (network/kafka.py)
        # What ApiVersions lists: the keys this broker has handlers and schemas for.
        self.api_versions = [{"api_key": key, "min_version": low, "max_version": high}
                             for key, (low, high) in sorted(SUPPORTED.items())
                             if key in self.handlers and (key, high) in REQUESTS]

    def _api_versions(self, request: Request) -> dict:
        error = kafka_errors.NONE if request.body is not None else kafka_errors.UNSUPPORTED_VERSION
        return {"error_code": error, "api_keys": self.api_versions, "throttle_time_ms": 0}


def modern_broker(config: BrokerConfig, logs: LogManager, stats: BrokerStats, *, port, clock, offsets,
                  producer_ids, zk=None, cluster=None, replicas: ReplicaManager | None = None,
                  controller=None, endpoints=None, sasl_mechanisms: tuple[str, ...] = (),
                  authorizer: AclAuthorizer | None = None, quotas: QuotaChecks | None = None) -> ModernBroker:
    """The ModernBroker of one broker. ``port()`` is the modern listener's bound port;
    ``offsets`` and ``producer_ids`` are the stores tap.py picked (ZooKeeper's or log.dir's);
    ``zk``, ``cluster`` (ClusterState), ``replicas`` and ``controller`` are None without
    ZooKeeper. ``endpoints()``: {listener name: (host, port)} of this broker's listeners;
    ``sasl_mechanisms``: those enabled when a listener uses SASL (the SASL APIs are then listed
    and answered on every listener, as Kafka does; none: not listed, as before);
    ``authorizer`` None when authorization is off (every handler then unchecked); ``quotas``
    None without ZooKeeper (where they live): Produce and Fetch are then never throttled."""
    view = KafkaClusterView(broker_id=config.brokerid, host=config.hostname or "127.0.0.1", port=port, logs=logs,
                            partitions_for=logs.partitions_for, zk=zk, cluster=cluster, controller=controller,
                            endpoints=endpoints)
    topics = TopicRequests(view, num_partitions=config.num_partitions,
                           default_replication_factor=config.default_replication_factor,
                           auto_create=config.auto_create_topics_enable, clock=clock)
    partitions = PartitionFinder(view, replicas)
    produce = ProduceRequests(partitions, stats, max_batch_bytes=config.kafka_max_batch_bytes,
                              clock=clock, producer_ids=producer_ids, replicas=replicas)
    fetch = FetchRequests(partitions, stats, clock=clock)
    coordinator = GroupCoordinator(clock=clock, offsets=offsets, partition_names=view.partition_names,
                                   is_coordinator=lambda: view.controller_id() == view.broker_id)
    groups = GroupRequests(topics, coordinator)
    sasl = SaslRequests(sasl_mechanisms)
    acls = AclRequests(authorizer, zk)
    handlers = {
        **({api_keys.SASL_HANDSHAKE: sasl.handshake, api_keys.SASL_AUTHENTICATE: sasl.authenticate}
           if sasl_mechanisms else {}),
        api_keys.PRODUCE: produce.produce,
        api_keys.INIT_PRODUCER_ID: produce.init_producer_id,
        api_keys.FETCH: fetch.fetch,
        api_keys.LIST_OFFSETS: fetch.list_offsets,
        api_keys.METADATA: topics.metadata,
        api_keys.CREATE_TOPICS: topics.create_topics,
        api_keys.DELETE_TOPICS: topics.delete_topics,
        api_keys.FIND_COORDINATOR: groups.find_coordinator,
        api_keys.JOIN_GROUP: groups.join_group,
        api_keys.SYNC_GROUP: groups.sync_group,
        api_keys.HEARTBEAT: groups.heartbeat,
        api_keys.LEAVE_GROUP: groups.leave_group,
        api_keys.OFFSET_COMMIT: groups.offset_commit,
        api_keys.OFFSET_FETCH: groups.offset_fetch,
        api_keys.DESCRIBE_GROUPS: groups.describe_groups,
        api_keys.LIST_GROUPS: groups.list_groups,
        api_keys.DESCRIBE_ACLS: acls.describe_acls,
        api_keys.CREATE_ACLS: acls.create_acls,
        api_keys.DELETE_ACLS: acls.delete_acls,
    }
    if authorizer is not None:
        authorization = Authorization(authorizer)
        topics.may_create = lambda request, name: (
            authorization.may(request, Operation.DESCRIBE, ResourceType.TOPIC, name)
            and authorization.may_create_topic(request, name))
        handlers = authorization.wrap(handlers)
    # Quotas count what is answered, after the authorizer's refusals, as Kafka's KafkaApis does.
    return ModernBroker(stats, quotas.wrap(handlers) if quotas is not None else handlers)
