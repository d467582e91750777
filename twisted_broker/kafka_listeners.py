"""The listeners of today's Kafka clients (docs/kafka-protocol.md, docs/security.md): one
factory per listener of Kafka's ``listeners`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), all
over the same logs and one handler table. Part of the composition root: tap.py calls
``kafka_listener`` with the parts it picked.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from twisted.internet.endpoints import serverFromString

from twisted_broker.codec.kafka.api_keys import API_NAMES
from twisted_broker.config import BrokerConfig
from twisted_broker.coordinator.group.offset_store import FileOffsets, ZooKeeperOffsets
from twisted_broker.coordinator.producer.producer_ids import FileProducerIds, ZooKeeperProducerIds
from twisted_broker.handlers.kafka.quotas import QuotaChecks
from twisted_broker.handlers.kafka.sasl import sasl_sessions
from twisted_broker.handlers.kafka.table import modern_broker
from twisted_broker.network.connection_limits import ConnectionLimits
from twisted_broker.network.kafka import KafkaModernFactory
from twisted_broker.network.listener_endpoints import BoundEndpoint, listener_endpoint, server_tls_options
from twisted_broker.network.sasl_gate import SaslKafkaFactory
from twisted_broker.registry.quota_watch import QuotaCache
from twisted_broker.registry.user_credentials import UserCredentials
from twisted_broker.replication.service import ReplicationService
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.security.listeners import PLAINTEXT, ListenerSpec
from twisted_broker.security.quota import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, ClientQuotas
from twisted_broker.security.quota_settings import UNLIMITED_CONNECTIONS
from twisted_broker.server.services import Listener
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.log_manager import LogManager

# The Kafka listeners' accept queue. Twisted's default (50, as Java's in 0.7) overflows when a
# few hundred clients connect at once while the reactor is busy: Linux then drops their
# handshakes (nstat's ListenOverflows), and a client that already sent its request can be
# reset. The kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024


def abspath(path: str | None) -> str | None:
    """A file named on the command line as an absolute path; None stays None."""
    return path and os.path.abspath(path)


@dataclass(frozen=True)
class KafkaListener:
    """The listeners of today's Kafka clients, their request figures and users' credentials."""

    listeners: list[Listener]
    port: object  # () -> int: the first one's, once bound
    endpoints: object  # () -> {listener name: (host, port)}
    requests: RequestStats
    credentials: UserCredentials | None  # None: no SASL listener, or no ZooKeeper


def tls_options(config: BrokerConfig, spec: ListenerSpec):
    return server_tls_options(spec, certificate_chain=config.ssl_keystore_certificate_chain, key=config.ssl_keystore_key,
                              truststore=config.ssl_truststore_certificates, client_auth=config.ssl_client_auth)


def kafka_endpoints(config: BrokerConfig, options: Mapping, reactor) -> list[tuple[ListenerSpec, BoundEndpoint]]:
    """Each modern listener and its endpoint: ``--kafka-endpoint`` (one PLAINTEXT listener;
    'none': no listener), else ``listeners`` or kafka.port's (config.modern_listeners)."""
    if options["kafka-endpoint"] == "none":
        return []
    if options["kafka-endpoint"]:
        spec = ListenerSpec(PLAINTEXT, PLAINTEXT, config.hostname or "127.0.0.1", 0)
        return [(spec, BoundEndpoint(serverFromString(reactor, options["kafka-endpoint"])))]
    return [(spec, BoundEndpoint(listener_endpoint(reactor, spec, backlog=LISTEN_BACKLOG,
                                                   tls=tls_options(config, spec) if spec.uses_tls else None)))
            for spec in config.modern_listeners()]


def connection_limits(config: BrokerConfig) -> ConnectionLimits | None:
    """max.connections.per.ip and its overrides, shared by every Kafka listener; None when
    unlimited (nothing is then counted). A host name in the overrides is resolved once, now."""
    if config.max_connections_per_ip >= UNLIMITED_CONNECTIONS and not config.max_connections_per_ip_overrides:
        return None
    overrides = {}
    for host, count in config.max_connections_per_ip_overrides.items():
        try:
            overrides[socket.gethostbyname(host)] = count
        except OSError as exc:
            logging.getLogger(__name__).warning("max.connections.per.ip.overrides: %s not resolved (%s); ignored",
                                                host, exc)
    return ConnectionLimits(config.max_connections_per_ip, overrides)


def client_quotas(config: BrokerConfig, zk, requests: RequestStats, reactor) -> QuotaChecks:
    """Produce and fetch quotas (docs/security.md, "Quotas"), followed in ZooKeeper from the
    first connection on."""
    windows = dict(window_num=config.quota_window_num, window_size_seconds=config.quota_window_size_seconds)
    produce, fetch = ClientQuotas(PRODUCER_BYTE_RATE, **windows), ClientQuotas(CONSUMER_BYTE_RATE, **windows)
    QuotaCache(zk, (produce, fetch), clock=reactor).start()  # a state listener: loads once connected
    return QuotaChecks(produce, fetch, clock=reactor, stats=requests)


def kafka_listener(config: BrokerConfig, options: Mapping, logs: LogManager, stats: BrokerStats, zk, cluster,
                   replication: ReplicationService | None, authorizer: AclAuthorizer | None,
                   reactor, limits: ConnectionLimits | None = None) -> KafkaListener | None:
    """The modern listeners (docs/kafka-protocol.md, docs/security.md) over the same logs and
    one handler table; None when there is none."""
    bound = kafka_endpoints(config, options, reactor)
    if not bound:
        return None
    def endpoints() -> dict[str, tuple[str, int]]:  # an empty host binds all: advertise hostname
        return {spec.name: (spec.host or config.hostname or "127.0.0.1", end.port()) for spec, end in bound}

    uses_sasl = any(spec.uses_sasl for spec, _ in bound)
    # The topics' figures are the 0.7 broker's; the request figures are these listeners' own.
    requests = RequestStats(config.monitoring_period_secs, reactor.seconds, names=API_NAMES, always=())
    if limits is not None:
        requests.refused_connections = lambda: limits.refused
    modern_stats = BrokerStats(requests, all_topics=stats.all_topics, topics=stats.topics,
                               log_messages=stats.log_messages)
    table = modern_broker(
        config, logs, modern_stats, port=bound[0][1].port, clock=reactor,
        offsets=ZooKeeperOffsets(zk) if zk is not None else FileOffsets(config.log_dir),
        producer_ids=(ZooKeeperProducerIds(zk, config.brokerid) if zk is not None
                      else FileProducerIds(config.log_dir, config.brokerid)),
        zk=zk, cluster=cluster, replicas=replication and replication.manager,
        controller=replication and replication.controller, endpoints=endpoints,
        sasl_mechanisms=config.sasl_enabled_mechanisms if uses_sasl else (), authorizer=authorizer,
        quotas=zk and client_quotas(config, zk, requests, reactor))
    credentials = UserCredentials(zk) if uses_sasl and zk is not None else None
    sessions = sasl_sessions(enabled=config.sasl_enabled_mechanisms, decoy_secret=os.urandom(32),
                             credentials=credentials.lookup if credentials else lambda mechanism, user: None)
    listeners = []
    for index, (spec, endpoint) in enumerate(bound):
        common = dict(max_request_size=config.max_socket_request_bytes, send_buffer_bytes=config.socket_send_buffer,
                      receive_buffer_bytes=config.socket_receive_buffer, clock=reactor, listener_name=spec.name,
                      limits=limits)
        factory = (SaslKafkaFactory(table, sasl_sessions=sessions, **common, failed_authentication_delay_ms=(
                       config.connection_failed_authentication_delay_ms))
                   if spec.uses_sasl else KafkaModernFactory(table, **common))
        listeners.append(Listener(f"Kafka clients' protocol ({spec.name})", endpoint, factory,
                                  abspath(options["kafka-port-file"]) if index == 0 else None))
    return KafkaListener(listeners, bound[0][1].port, endpoints, requests, credentials)
