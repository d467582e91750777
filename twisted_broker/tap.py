"""``twistd broker``: command-line options and the composition root that builds the service tree.

This is one of the two places that name the global reactor (the other is cli.py); everything
below receives it. Configuration comes from a Kafka 0.7 ``server.properties`` with the options
below overriding its keys.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import socket
import time
from dataclasses import dataclass
from logging.handlers import BufferingHandler

from OpenSSL.crypto import Error as OpenSSLError
from twisted.internet.endpoints import serverFromString
from twisted.internet.threads import deferToThreadPool
from twisted.python import usage

from twisted_broker.config import BrokerConfig, ConfigError
from twisted_broker.handlers.debug.commands import DebugCommands
from twisted_broker.handlers.kafka.topics import ListenerRegistration
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.handlers.kafka07.replication_requests import ReplicationRequests
from twisted_broker.network.debug_lines import DebugFactory
from twisted_broker.network.kafka07 import KafkaServerFactory
from twisted_broker.network.kafka07_client import connect_client
from twisted_broker.network.listener_endpoints import client_tls_for, listener_endpoint, server_endpoint
from twisted_broker.registry.acl_watch import AclCache
from twisted_broker.registry.broker_registration import BrokerRegistration
from twisted_broker.registry.zookeeper import ZooKeeper
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.controller import Controller
from twisted_broker.replication.fetcher import Fetchers
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.replication.service import ReplicationService
from twisted_broker.security.acl import parse_super_users
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.security.listeners import SSL, ListenerSpec
from twisted_broker.security.endpoint_exposure import binds_beyond_loopback, requires_client_certificates
from twisted_broker.server.services import BrokerService, Listener, StopInOrder
from twisted_broker.server.stats import BrokerStats, RequestStats, broker_snapshot, replication_snapshot
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_dir_lock import LogDirLocked, lock_log_dir
from twisted_broker.kafka_listeners import (
    LISTEN_BACKLOG, KafkaListener, abspath, connection_limits, kafka_listener, tls_options,
)
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.twisted_logging import forward_logging

DEFAULT_CONFIG = "etc/server.properties"

class Options(usage.Options):
    optParameters = [
        ["config", "c", DEFAULT_CONFIG, "Kafka 0.7 server.properties file"],
        ["port", "p", None, "port of the wire protocol (overrides port; 0 picks a free one)"],
        ["broker-id", None, None, "broker id (overrides brokerid)"],
        ["log-dir", None, None, "directory of the partition logs (overrides log.dir)"],
        ["zk", None, None, "ZooKeeper connect string host:port[,...][/chroot] (overrides zk.connect)"],
        ["listen", None, None, "Twisted endpoint of the wire protocol, e.g. ssl:9092:privateKey=k.pem "
                               "(default tcp:<port>:interface=<hostname or 127.0.0.1>:backlog=1024)"],
        ["webui", None, "none", "endpoint of the embedded admin console, e.g. tcp:8080:interface=127.0.0.1 "
                                "(make run's); 'none' turns it off"],
        ["webui-port-file", None, None, "write the admin console's bound port to this file (for tests)"],
        ["debug", None, "none", "endpoint of the telnet-style debug port, e.g. tcp:9093:interface=127.0.0.1 "
                                "(make run's); 'none' turns it off"],
        ["debug-port-file", None, None, "write the debug port's bound port to this file (for tests)"],
        ["debug-idle-timeout", None, "300", "seconds after which an idle debug session is closed"],
        ["debug-password-file", None, None, "the debug port's password (the file's first line): every "
                                            "session must send 'auth PASSWORD' first"],
        ["port-file", None, None, "write the bound port to this file once started (for tests)"],
        ["kafka-endpoint", None, None, "Twisted endpoint of the Kafka protocol of today's clients, e.g. "
                                       "ssl:9094:privateKey=k.pem (default tcp:<kafka.port>:interface=<hostname "
                                       "or 127.0.0.1>:backlog=1024; 'none' turns it off, as kafka.port=0 does)"],
        ["kafka-port-file", None, None, "write the Kafka clients' listener's bound port to this file (for tests)"],
    ]
    optFlags = [["no-zk", None, "run without ZooKeeper (enable.zookeeper=false)"],
                ["allow-admin-actions", None, "enable the admin console's one write action (resetting a "
                                              "stopped group's offsets)"],
                ["webui-require-login", None, "the admin console asks for a login on loopback too (always "
                                              "beyond it)"]]

    def overrides(self) -> dict[str, str]:
        """The properties the command line sets, keyed by their Kafka 0.7 names."""
        keys = {"port": "port", "broker-id": "brokerid", "log-dir": "log.dir", "zk": "zk.connect"}
        result = {key: self[option] for option, key in keys.items() if self[option] is not None}
        if self["no-zk"]:
            result["enable.zookeeper"] = "false"
        return result

    def postOptions(self) -> None:
        try:
            self["debug-idle-timeout"] = float(self["debug-idle-timeout"])
        except ValueError:
            raise usage.UsageError("--debug-idle-timeout: a number of seconds") from None
        if not self["debug-idle-timeout"] > 0:
            raise usage.UsageError("--debug-idle-timeout: must be more than 0 seconds")
        self.debug_password = debug_password(self["debug"], self["debug-password-file"])
        # The config warns about unknown keys. Those warnings belong in twistd's log, which
        # keeps events until it opens, not on a stderr that a daemon closes; if the config is
        # refused the log never opens, so they go with the error (brokerId=0 -> brokerid).
        forward_logging()
        warnings = BufferingHandler(capacity=1000)
        config_log = logging.getLogger("twisted_broker.config")
        config_log.addHandler(warnings)
        try:
            self.config = BrokerConfig.load(self["config"], overrides=self.overrides())
        except (ConfigError, OSError) as exc:
            raise usage.UsageError("\n".join([*map(warnings.format, warnings.buffer), str(exc)])) from None
        finally:
            config_log.removeHandler(warnings)
        if self.config.enable_zookeeper and not self.config.zk_connect:
            raise usage.UsageError("zk.connect is required unless enable.zookeeper=false (--no-zk)")
        if self["kafka-endpoint"] and self.config.listeners:
            raise usage.UsageError("--kafka-endpoint and listeners= do not go together")
        if self["listen"] and self.config.security_inter_broker_protocol == SSL:
            raise usage.UsageError("--listen and security.inter.broker.protocol=SSL do not go together")
        try:  # the PEM material is read now, so that a bad one is an error, not a traceback
            [tls_options(self.config, spec) for spec in self.config.modern_listeners() if spec.uses_tls]
            if self.config.security_inter_broker_protocol == SSL:
                tls_options(self.config, kafka07_spec(self.config))
                follower_connect(self.config)
        except (ValueError, TypeError, OSError, OpenSSLError) as exc:
            raise usage.UsageError(f"TLS listener: {exc}") from None


def debug_password(endpoint: str, password_file: str | None) -> bytes | None:
    """The debug port's password, read from ``password_file``; refuses (UsageError) a debug
    port reachable beyond loopback that requires neither a password nor client certificates
    (docs/security.md, "The debug port"): ``tail`` and ``dump`` show message contents."""
    password = None
    if password_file:
        try:
            with open(password_file, "rb") as file:
                password = file.readline().strip()
        except OSError as exc:
            raise usage.UsageError(f"--debug-password-file: {exc}") from None
        if not password:
            raise usage.UsageError(f"--debug-password-file: {password_file} holds no password (its first line)")
    if (endpoint != "none" and password is None and binds_beyond_loopback(endpoint)
            and not requires_client_certificates(endpoint)):
        raise usage.UsageError(
            f"--debug {endpoint}: the debug port would be reachable beyond loopback, and its tail and dump "
            "commands show message contents; bind it to 127.0.0.1 (interface=127.0.0.1), or require a "
            "password (--debug-password-file FILE) or client certificates (an ssl: endpoint with caCertsDir=)")
    return password


def policy_for(config: BrokerConfig):
    """The LogPolicy of each topic: 0.7's global keys with the per-topic maps applied."""
    def policy(topic: str) -> LogPolicy:
        return LogPolicy(
            file_size=config.file_size_for(topic),
            roll_ms=config.roll_hours_for(topic) * 3600 * 1000,
            flush_interval_messages=config.log_flush_interval,
            flush_interval_ms=config.flush_interval_ms_for(topic),
            retention_ms=config.retention_hours_for(topic) * 3600 * 1000,
            retention_bytes=config.retention_size_for(topic))
    return policy


def _advertised_host(config: BrokerConfig) -> str:
    if config.hostname:
        return config.hostname
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def freeze_startup_objects() -> None:
    """Take what exists once the broker runs (Twisted, the modules, the opened logs) out of
    the cyclic garbage collector's sight.

    A full collection walks every tracked object: about 50,000 here, 20-30 ms on this
    machine, every few seconds under a steady load, in which no request is served. Frozen,
    they are never walked again; what the broker allocates later is collected as before.
    """
    gc.collect()  # so that no garbage is frozen with them
    gc.freeze()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEEP_MMAP_BELOW = 16 << 20  # allocations below this come from the heap, freed ones reused
KEEP_TRIM_BELOW = 64 << 20  # freed heap kept up to this much before it goes back to the kernel


def keep_freed_buffers() -> None:
    """Let glibc's malloc reuse freed megabyte buffers instead of handing them back at once.

    A modern produce allocates and frees several ~1 MB buffers per record batch (the request,
    its records, the values' 0.7 set, the stored entry). With glibc's defaults, freed ones are
    unmapped or trimmed off the heap and the next ones page-fault in again: about 0.25 us of
    broker CPU per 200-byte record on bench/modern.py's confluent-kafka produce (1.40-1.55
    down to 1.20-1.25 us), against 0.85-1.05 us for the whole 0.7 path, which it does not
    change. Elsewhere than glibc (musl, macOS) there is nothing to tune.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_BELOW)
    mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_BELOW)


def makeService(options: Options):  # BrokerService, in a StopInOrder with replication or --webui
    """The broker, part by part: ZooKeeper, storage, replication, the three listeners, the
    broker service, then replication and the console around it."""
    from twisted.internet import reactor  # the composition root is the one place that names it

    forward_logging()
    keep_freed_buffers()
    config: BrokerConfig = options.config
    try:  # before anything reads the logs or registers (kept open for the process's life)
        options.log_dir_lock = lock_log_dir(config.log_dir, wait_s=config.zk_sessiontimeout_ms * 1.5 / 1000)
    except LogDirLocked as exc:
        raise SystemExit(f"twistd broker: {exc}") from None  # the message alone, no traceback
    zk = registry = None
    if config.enable_zookeeper:
        zk = ZooKeeper(config.zk_connect, reactor=reactor, session_timeout_ms=config.zk_sessiontimeout_ms)
        registry = registry_parts(config, zk, reactor)
    cluster = registry and registry.cluster
    logs = storage(config, cluster, reactor)
    stats = BrokerStats(RequestStats(config.monitoring_period_secs, reactor.seconds))
    replication = registry and replication_service(config, zk, registry, logs, stats, reactor)
    authorizer = acl_authorizer(config, zk, reactor)
    broker = Broker(logs, stats, max_message_size=config.max_message_size,
                    replication=replication and replication.requests, authorizer=authorizer)
    # The wire protocol first: its port is the one registered in ZooKeeper.
    limits = connection_limits(config)  # max.connections.per.ip over both protocols' listeners
    listeners = [kafka07_listener(config, options, broker, reactor, limits)]
    kafka = kafka_listener(config, options, logs, stats, zk, cluster, replication, authorizer, reactor, limits)
    if kafka is not None:
        listeners.extend(kafka.listeners)
    figures = replication_figures(replication)
    if options["debug"] != "none":
        listeners.append(debug_listener(config, options, logs, stats, zk, figures, kafka, reactor))
    service = BrokerService(
        logs=logs, listeners=listeners, reactor=reactor,
        flush_check_interval_ms=config.log_default_flush_scheduler_interval_ms,
        flush_worker=config.log_flush_worker,
        cleanup_interval_mins=config.log_cleanup_interval_mins, registration=registry and registry.registration,
        zk_connect_timeout_ms=config.zk_connectiontimeout_ms)
    service.broker = broker
    reactor.callWhenRunning(freeze_startup_objects)
    if options["webui"] == "none" and replication is None and (kafka is None or kafka.credentials is None):
        return service
    # Stops its children one by one, in reverse: the console's port closes first, then
    # replication moves this broker's leaderships away while it still serves, then the
    # listeners and logs.
    top = StopInOrder()
    service.setServiceParent(top)
    top.broker = broker
    if kafka is not None and kafka.credentials is not None:
        kafka.credentials.setServiceParent(top)
    if replication is not None:
        replication.setServiceParent(top)
        top.replication = replication
        if kafka is not None:
            ListenerRegistration(zk, broker_id=config.brokerid, host=config.hostname or "127.0.0.1",
                                 port=kafka.port, endpoints=kafka.endpoints).setServiceParent(top)
    if options["webui"] != "none":
        console(config, options, logs, stats, zk, figures, kafka, service, authorizer, reactor).setServiceParent(top)
    return top


# -- the parts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RegistryParts:
    """What a broker with ZooKeeper keeps there: its registration and the cluster's state."""

    registration: BrokerRegistration
    cluster: ClusterState


def registry_parts(config: BrokerConfig, zk: ZooKeeper, reactor) -> RegistryParts:
    registration = BrokerRegistration(
        zk, broker_id=config.brokerid, host=_advertised_host(config), startup_ms=int(time.time() * 1000),
        partitions_for=config.partitions_for, session_timeout_ms=config.zk_sessiontimeout_ms, clock=reactor)
    return RegistryParts(registration, ClusterState(zk))


def acl_authorizer(config: BrokerConfig, zk: ZooKeeper | None, reactor) -> AclAuthorizer | None:
    """The ACL authorizer both listeners check (docs/security.md), its ACLs followed in
    ZooKeeper from the first connection on; None when authorizer.class.name is empty."""
    if not config.authorizer_class_name:
        return None
    authorizer = AclAuthorizer(super_users=parse_super_users(config.super_users),
                               allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found)
    AclCache(zk, authorizer, clock=reactor).start()  # a state listener: loads once connected
    return authorizer


def storage(config: BrokerConfig, cluster: ClusterState | None, reactor) -> LogManager:
    """The partition logs; a replicated topic's partition count is its assignment's."""
    partitions_for = config.partitions_for
    if cluster is not None:
        def partitions_for(topic: str) -> int:
            return cluster.partition_count(topic) or config.partitions_for(topic)
    return LogManager(config.log_dir, now=reactor.seconds, partitions_for=partitions_for,
                      policy_for=policy_for(config), max_topic_name_length=config.max_topic_name_length,
                      visible_at_append=config.log_visibility == "committed")


def replication_service(config: BrokerConfig, zk: ZooKeeper, registry: RegistryParts, logs: LogManager,
                        stats: BrokerStats, reactor) -> ReplicationService:
    """The replication service (docs/replication.md), its request handlers as ``.requests``."""
    cluster = registry.cluster
    manager = ReplicaManager(broker_id=config.brokerid, logs=logs, zk=zk, cluster=cluster, clock=reactor,
                             session=registry.registration.info.creator_id,
                             lag_time_max_ms=config.replica_lag_time_max_ms,
                             min_insync_replicas=config.min_insync_replicas,
                             count_flushed=config.log_visibility == "flushed",
                             # the checkpoint's fsyncs in Twisted's thread pool, not on the reactor
                             run_blocking=lambda function, *args: deferToThreadPool(
                                 reactor, reactor.getThreadPool(), function, *args))
    # A follower must be able to fetch the largest message whole, whatever its fetch size.
    fetchers = Fetchers(manager, reactor=reactor, fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
                        connect=follower_connect(config),
                        fetch_max_bytes=max(config.replica_fetch_max_bytes, config.max_message_size + 1024))
    service = ReplicationService(
        cluster=cluster, manager=manager, fetchers=fetchers, zk=zk, reactor=reactor,
        controller=Controller(broker_id=config.brokerid, zk=zk, cluster=cluster, clock=reactor,
                              unclean_leader_election=config.unclean_leader_election_enable),
        controlled_shutdown=config.controlled_shutdown_enable,
        controlled_shutdown_max_ms=config.controlled_shutdown_max_ms)
    service.requests = ReplicationRequests(
        manager, stats=stats, max_message_size=config.max_message_size,
        default_replication_factor=config.default_replication_factor, num_partitions=config.num_partitions,
        clock=reactor)
    return service


def replication_figures(replication: ReplicationService | None):
    """What the debug port and the console show of replication (None without it)."""
    if replication is None:
        return None
    return lambda: replication_snapshot(replication.manager, replication.controller, replication.fetchers)


def kafka07_listener(config: BrokerConfig, options: Options, broker: Broker, reactor, limits=None) -> Listener:
    factory = KafkaServerFactory(broker, max_request_size=config.max_socket_request_bytes, limits=limits,
                                 send_buffer_bytes=config.socket_send_buffer,
                                 receive_buffer_bytes=config.socket_receive_buffer, clock=reactor,
                                 fetch_wait_max_ms=config.fetch_wait_max_ms)
    if config.security_inter_broker_protocol == SSL:  # the brokers' port is TLS (docs/security.md)
        spec = kafka07_spec(config)
        endpoint = listener_endpoint(reactor, spec, backlog=LISTEN_BACKLOG, tls=tls_options(config, spec))
        return Listener("wire protocol", endpoint, factory, abspath(options["port-file"]))
    # Bound to 127.0.0.1 unless the configuration names a host, as every port of ours.
    listen = options["listen"] or (
        f"tcp:{config.port}:interface={config.hostname or '127.0.0.1'}:backlog={LISTEN_BACKLOG}")
    return Listener("wire protocol", serverFromString(reactor, listen), factory, abspath(options["port-file"]))


def kafka07_spec(config: BrokerConfig) -> ListenerSpec:
    """The 0.7 port as a TLS listener (security.inter.broker.protocol=SSL): ssl.client.auth applies."""
    return ListenerSpec("KAFKA07", SSL, config.hostname or "127.0.0.1", config.port)


def follower_connect(config: BrokerConfig):
    """How followers reach their leaders' 0.7 ports: plain TCP, or with
    security.inter.broker.protocol=SSL over TLS, showing this broker's own certificate."""
    if config.security_inter_broker_protocol != SSL:
        return connect_client
    tls_for = client_tls_for(certificate_chain=config.ssl_keystore_certificate_chain, key=config.ssl_keystore_key,
                             truststore=config.ssl_truststore_certificates)
    return lambda reactor, host, port, **options: connect_client(reactor, host, port, tls=tls_for(host), **options)


def debug_listener(config: BrokerConfig, options: Options, logs: LogManager, stats: BrokerStats, zk, figures,
                   kafka: KafkaListener | None, reactor) -> Listener:
    commands = DebugCommands(logs, stats, clock=reactor, broker_id=config.brokerid, zk=zk, replication=figures,
                             kafka_requests=kafka and kafka.requests)
    return Listener("debug port", server_endpoint(reactor, options["debug"]),
                    DebugFactory(commands, clock=reactor, idle_timeout_s=options["debug-idle-timeout"],
                                 password=options.debug_password),
                    abspath(options["debug-port-file"]))


def console(config: BrokerConfig, options: Options, logs: LogManager, stats: BrokerStats, zk, figures,
            kafka: KafkaListener | None, service: BrokerService, authorizer: AclAuthorizer | None, reactor):
    """The embedded admin console (``--webui``), following the broker's ACLs if it has them."""
    # Imported here, not at the top: klein, werkzeug, jinja2 and prometheus_client are about a
    # third of a broker's start-up imports, and most brokers run without a console.
    from webui.service import LoginSettings, embedded_console
    kafka_requests = kafka and kafka.requests
    return embedded_console(
        serverFromString(reactor, options["webui"]), reactor=reactor, broker_id=config.brokerid,
        snapshot=lambda: broker_snapshot(stats, logs, kafka_requests), replication=figures, zk=zk,
        zk_connect=config.zk_connect, host=config.hostname or "127.0.0.1", port=lambda: service.port,
        topics=logs.topics,
        partitions_for=config.partitions_for, allow_admin_actions=bool(options["allow-admin-actions"]),
        port_file=abspath(options["webui-port-file"]), authorizer=authorizer,
        login=LoginSettings(require_login=bool(options["webui-require-login"])))
