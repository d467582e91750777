"""Kafka 0.7 configuration: a Java-properties reader and the broker, producer and consumer
settings (spec section 6) as frozen dataclasses.

Each dataclass body is the table of its keys: the attribute is the 0.7 key with dots turned
into underscores, its annotation says how the text is parsed, its default is the 0.7.2
default. Field metadata adds what 0.7 checks besides: ``min`` (0.7's getIntInRange),
``same_as`` (a default taken from another key) and ``key`` (the one 0.7 key that is not
lower case, queue.enqueueTimeout.ms). Literal annotations list the accepted values.
As in Kafka, BrokerConfig, ProducerConfig and ConsumerConfig all extend ZKConfig.
"""

from __future__ import annotations

import logging
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Self

from twisted_broker.properties import ConfigError, parse_properties, read_properties
from twisted_broker.security.listeners import PLAINTEXT, ListenerSpec, parse_listeners
from twisted_broker.security.quota_settings import QuotaSettings
from twisted_broker.security.sasl import MECHANISMS

__all__ = ["BrokerConfig", "ConfigError", "ConsumerConfig", "ProducerConfig", "ZKConfig", "parse_properties",
           "read_properties"]

log = logging.getLogger(__name__)
_INT = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt: no spaces, underscores or 0x
# authorizer.class.name values that turn this broker's ACL authorizer on: Kafka's, its 2.4 name.
ACL_AUTHORIZER_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")


# --- value parsers, chosen by annotation --------------------------------------------------

def _parse_int(key: str, raw: str) -> int:
    if not _INT.fullmatch(raw):
        raise ConfigError(f"{key}={raw!r}: not an integer")
    return int(raw)


def _parse_bool(key: str, raw: str) -> bool:
    # 0.7's Utils.getBoolean accepts exactly these two spellings.
    if raw not in ("true", "false"):
        raise ConfigError(f"{key}={raw!r}: must be true or false")
    return raw == "true"


def _parse_str(key: str, raw: str) -> str:
    return raw


def _parse_csv(key: str, raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _parse_topic_map(key: str, raw: str) -> Mapping[str, int]:
    """Parse ``topic:value,topic:value``; as 0.7, a bad token is logged and skipped."""
    values: dict[str, int] = {}
    for token in raw.split(","):
        if not token.strip():
            continue
        # Both sides are trimmed: 0.7's own sample (topic1:3, topic2:4) has a space that
        # 0.7 kept in the topic name, so that override never applied.
        topic, sep, value = (part.strip() for part in token.partition(":"))
        if sep and topic and _INT.fullmatch(value) and int(value) > 0:
            values[topic] = int(value)
        else:
            log.warning("%s: skipping malformed token %r (want topic:value, value > 0)", key, token)
    return types.MappingProxyType(values)


_PARSERS: dict[Any, Callable[[str, str], Any]] = {
    int: _parse_int,
    bool: _parse_bool,
    str: _parse_str,
    tuple[str, ...]: _parse_csv,
    Mapping[str, int]: _parse_topic_map,
}


@dataclass(frozen=True)
class _Setting:
    key: str
    name: str
    parse: Callable[[str, str], Any]
    required: bool
    choices: tuple[Any, ...] | None  # from a Literal annotation
    minimum: int | None
    same_as: str | None  # the attribute whose value is the default


def _parser_and_choices(
        annotation: Any) -> tuple[Callable[[str, str], Any], tuple[Any, ...] | None]:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        return _PARSERS[type(choices[0])], choices
    if origin in (typing.Union, types.UnionType):  # X | None: None only as the default
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return _PARSERS[annotation], None


_TABLES: dict[type, tuple[_Setting, ...]] = {}  # each config class's table, built once


def _settings(cls: type) -> tuple[_Setting, ...]:
    if cls not in _TABLES:
        hints = typing.get_type_hints(cls)
        table = []
        for f in fields(cls):
            parse, choices = _parser_and_choices(hints[f.name])
            required = f.default is MISSING and f.default_factory is MISSING
            table.append(_Setting(f.metadata.get("key", f.name.replace("_", ".")), f.name,
                                  parse, required, choices, f.metadata.get("min"),
                                  f.metadata.get("same_as")))
        _TABLES[cls] = tuple(table)
    return _TABLES[cls]


def _at_least(minimum: int, default: int) -> Any:
    return field(default=default, metadata={"min": minimum})


def _same_as(name: str) -> Any:
    # None until __post_init__ copies the other attribute, which is then always set.
    return field(default=None, metadata={"same_as": name})


def _no_overrides() -> Mapping[str, int]:
    return types.MappingProxyType({})


def _cpu_count() -> int:
    return os.cpu_count() or 1


# --- the configurations -------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ZKConfig:
    """ZooKeeper client settings (0.7's ZKConfig), and the loading every config shares."""

    zk_connect: str | None = None
    zk_sessiontimeout_ms: int = 6000
    zk_connectiontimeout_ms: int = _same_as("zk_sessiontimeout_ms")
    zk_synctime_ms: int = 2000

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None,
             overrides: Mapping[str, str] | None = None) -> Self:
        """Read the properties file at path (None: no file), apply overrides (key -> text,
        as given on a command line), and build the config.

        Raises ConfigError (its message starts with the path) or OSError.
        """
        props = read_properties(path) if path is not None else {}
        props.update(overrides or {})
        return cls.from_properties(props, source=None if path is None else str(path))

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, source: str | None = None) -> Self:
        """Build the config from key -> text; unknown keys are logged (WARNING) and ignored.

        Raises ConfigError for a missing required key or an invalid value; source (a file
        name) prefixes its message and the warnings.
        """
        prefix = f"{source}: " if source else ""
        settings = _settings(cls)
        known = {setting.key for setting in settings}
        for key in props:
            if key not in known:
                log.warning("%sunknown key %s (ignored)", prefix, key)
        values = {}
        try:
            for setting in settings:
                if setting.key in props:
                    values[setting.name] = setting.parse(setting.key, props[setting.key])
                elif setting.required:
                    raise ConfigError(f"{setting.key} is required")
            return cls(**values)
        except ConfigError as e:
            raise ConfigError(f"{prefix}{e}") from None

    def __post_init__(self) -> None:
        # Checked here rather than while parsing, so a config built in code is held to
        # the same rules as one read from a file.
        for setting in _settings(type(self)):
            value = getattr(self, setting.name)
            if setting.same_as is not None and value is None:
                object.__setattr__(self, setting.name, getattr(self, setting.same_as))
            elif setting.minimum is not None and value < setting.minimum:
                raise ConfigError(f"{setting.key}={value}: must be at least {setting.minimum}")
            elif setting.choices is not None and value not in setting.choices:
                raise ConfigError(f"{setting.key}={value!r}: must be one of "
                                  + ", ".join(str(choice) for choice in setting.choices))
        self._check()

    def _check(self) -> None:
        """Check rules that span keys; raise ConfigError."""


@dataclass(frozen=True, kw_only=True)
class BrokerConfig(ZKConfig, QuotaSettings):
    """A broker's settings (0.7's KafkaConfig), spec 6.1; quotas' keys in security/quota_settings.py."""

    brokerid: int | None = None  # required: this, or Kafka's broker.id, or both with one value
    broker_id: int | None = None
    hostname: str | None = None  # None: publish the local IP address, as 0.7 does
    port: int = _at_least(0, 6667)  # 0 picks a free port (tests); 0.7 had no check
    num_threads: int = field(default_factory=_cpu_count, metadata={"min": 1})
    socket_send_buffer: int = 102400
    socket_receive_buffer: int = 102400
    max_socket_request_bytes: int = _at_least(1, 104857600)
    max_message_size: int = _at_least(0, 1000000)
    monitoring_period_secs: int = _at_least(1, 600)
    num_partitions: int = _at_least(1, 1)
    topic_partition_count_map: Mapping[str, int] = field(default_factory=_no_overrides)
    log_dir: str
    log_file_size: int = _at_least(5, 1073741824)  # 5: the smallest message header
    topic_log_file_size: Mapping[str, int] = field(default_factory=_no_overrides)
    log_roll_hours: int = _at_least(1, 168)
    topic_log_roll_hours: Mapping[str, int] = field(default_factory=_no_overrides)
    log_retention_hours: int = _at_least(1, 168)
    topic_log_retention_hours: Mapping[str, int] = field(default_factory=_no_overrides)
    log_retention_size: int = -1  # bytes; -1: no size limit
    topic_log_retention_size: Mapping[str, int] = field(default_factory=_no_overrides)
    log_cleanup_interval_mins: int = _at_least(1, 10)
    log_flush_interval: int = _at_least(1, 500)  # messages
    log_default_flush_interval_ms: int = _same_as("log_default_flush_scheduler_interval_ms")
    log_default_flush_scheduler_interval_ms: int = 3000
    topic_flush_intervals_ms: Mapping[str, int] = field(default_factory=_no_overrides)
    # Not in 0.7: where the fsyncs run (storage/process_flusher.py, storage/flusher.py).
    log_flush_worker: Literal["process", "thread"] = "process"
    # Not in 0.7: how long a fetch with nothing new may wait for a flush (handlers/held_fetch.py).
    fetch_wait_max_ms: int = _at_least(0, 0)
    max_topic_name_length: int = _at_least(1, 255)
    enable_zookeeper: bool = True
    # Replication (docs/replication.md §4), Kafka's names and defaults. A factor of 1 makes a
    # 0.7 topic, exactly as before.
    default_replication_factor: int = _at_least(1, 1)
    replica_lag_time_max_ms: int = _at_least(1, 10000)
    replica_fetch_wait_max_ms: int = _at_least(0, 500)
    replica_fetch_max_bytes: int = _at_least(1, 1048576)
    min_insync_replicas: int = _at_least(1, 1)
    unclean_leader_election_enable: bool = False
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_ms: int = _at_least(0, 5000)
    # auto: flushed (0.7's fsync gate) for 0.7 topics, committed (on every ISR member) for
    # replicated ones; flushed or committed apply to both.
    log_visibility: Literal["auto", "flushed", "committed"] = "auto"
    # The Kafka protocol of today's clients (docs/kafka-protocol.md), a second listener over
    # the same logs. Off (0) unless configured: etc/server.properties (make run) says 9094,
    # while the many brokers tests start on one machine must not all claim it.
    kafka_port: int = _at_least(0, 0)
    # The largest record batch a modern produce may carry, whatever 0.7's max.message.size
    # says of one message: Kafka's message.max.bytes (1048588) plus room for librdkafka's
    # ~1 MB batches and their framing.
    kafka_max_batch_bytes: int = _at_least(1, 1048588 + 65536)
    # A modern Metadata request for an unknown topic creates it (Kafka's key and default).
    auto_create_topics_enable: bool = True
    # Authentication (docs/security.md), Kafka's names; ``listeners`` replaces kafka.port.
    listeners: tuple[str, ...] = ()
    listener_security_protocol_map: tuple[str, ...] = ()
    sasl_enabled_mechanisms: tuple[str, ...] = MECHANISMS
    ssl_client_auth: Literal["none", "requested", "required"] = "none"
    ssl_keystore_type: Literal["PEM"] = "PEM"
    ssl_keystore_certificate_chain: str | None = None  # inline PEM or a file's path, as the two below
    ssl_keystore_key: str | None = None
    ssl_truststore_certificates: str | None = None
    connection_failed_authentication_delay_ms: int = _at_least(0, 100)
    security_inter_broker_protocol: Literal["PLAINTEXT", "SSL"] = "PLAINTEXT"  # SSL: a TLS 0.7 port, for followers too
    # Authorization (docs/security.md), Kafka's keys: authorizer.class.name empty is off.
    authorizer_class_name: str = ""
    super_users: str = ""  # User:a;User:b
    allow_everyone_if_no_acl_found: bool = False

    def _check(self) -> None:
        if self.brokerid is None and self.broker_id is None:
            raise ConfigError("brokerid is required (or Kafka's broker.id)")
        if None not in (self.brokerid, self.broker_id) and self.brokerid != self.broker_id:
            raise ConfigError(f"brokerid={self.brokerid} and broker.id={self.broker_id} disagree")
        # One id from here on, under both names: the rest of the broker reads brokerid.
        object.__setattr__(self, "brokerid", self.brokerid if self.brokerid is not None else self.broker_id)
        object.__setattr__(self, "broker_id", self.brokerid)
        # 0.7 would only fail once its ZooKeeper client started with no address.
        if self.enable_zookeeper and not self.zk_connect:
            raise ConfigError("zk.connect is required when enable.zookeeper=true")
        if unknown := sorted(set(self.sasl_enabled_mechanisms) - set(MECHANISMS)):
            raise ConfigError(f"sasl.enabled.mechanisms: {', '.join(unknown)} not served (only {', '.join(MECHANISMS)})")
        specs = self.modern_listeners()
        if any(spec.uses_tls for spec in specs) and not (self.ssl_keystore_certificate_chain and self.ssl_keystore_key):
            raise ConfigError("a TLS listener needs ssl.keystore.certificate.chain and ssl.keystore.key")
        if self.security_inter_broker_protocol == "SSL" and not (
                self.ssl_keystore_certificate_chain and self.ssl_keystore_key and self.ssl_truststore_certificates):
            raise ConfigError("security.inter.broker.protocol=SSL needs ssl.keystore.* and ssl.truststore.certificates")
        if self.ssl_client_auth != "none" and not self.ssl_truststore_certificates:
            raise ConfigError(f"ssl.client.auth={self.ssl_client_auth} needs ssl.truststore.certificates")
        if self.authorizer_class_name not in ("", *ACL_AUTHORIZER_NAMES):
            raise ConfigError(f"authorizer.class.name={self.authorizer_class_name}: must be empty or "
                              f"{ACL_AUTHORIZER_NAMES[0]}")
        if self.authorizer_class_name and not self.enable_zookeeper:
            raise ConfigError("authorizer.class.name needs ZooKeeper (enable.zookeeper=true): the ACLs live there")

    def modern_listeners(self) -> tuple[ListenerSpec, ...]:
        """The listeners of today's clients: ``listeners``, else kafka.port's one PLAINTEXT
        listener (none when 0). Raises ConfigError for listeners that do not parse."""
        if not self.listeners:
            return (ListenerSpec(PLAINTEXT, PLAINTEXT, self.hostname or "127.0.0.1", self.kafka_port),) \
                if self.kafka_port else ()
        try:
            return parse_listeners(self.listeners, self.listener_security_protocol_map)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def partitions_for(self, topic: str) -> int:
        """Number of partitions this broker holds for topic."""
        return self.topic_partition_count_map.get(topic, self.num_partitions)

    def flush_interval_ms_for(self, topic: str) -> int:
        """Longest time, in ms, unflushed messages of topic may wait for a flush."""
        return self.topic_flush_intervals_ms.get(topic, self.log_default_flush_interval_ms)

    def retention_hours_for(self, topic: str) -> int:
        """Age, in hours, past which topic's segments are deleted."""
        return self.topic_log_retention_hours.get(topic, self.log_retention_hours)

    def retention_size_for(self, topic: str) -> int:
        """Bytes per partition of topic kept by size-based retention; -1: no limit."""
        return self.topic_log_retention_size.get(topic, self.log_retention_size)

    def file_size_for(self, topic: str) -> int:
        """Size, in bytes, past which topic's newest segment rolls."""
        return self.topic_log_file_size.get(topic, self.log_file_size)

    def roll_hours_for(self, topic: str) -> int:
        """Age, in hours, of a segment's first append past which topic's log rolls."""
        return self.topic_log_roll_hours.get(topic, self.log_roll_hours)


@dataclass(frozen=True, kw_only=True)
class ProducerConfig(ZKConfig):
    """A producer's settings (0.7's ProducerConfig with its sync and async parts), spec 6.2."""

    broker_list: str | None = None  # id:host:port,id:host:port
    partitioner_class: str = "kafka.producer.DefaultPartitioner"
    producer_type: Literal["sync", "async"] = "sync"
    serializer_class: str = "kafka.serializer.DefaultEncoder"
    compression_codec: Literal[0, 1, 2] = 0  # none, gzip, snappy
    compressed_topics: tuple[str, ...] = ()  # empty: every topic, when a codec is set
    zk_read_num_retries: int = 3
    num_retries: int = 0
    batch_size: int = 200
    queue_time: int = 5000  # ms
    queue_size: int = 10000
    queue_enqueue_timeout_ms: int = field(default=0, metadata={"key": "queue.enqueueTimeout.ms"})
    buffer_size: int = 102400
    connect_timeout_ms: int = 5000
    socket_timeout_ms: int = 30000
    reconnect_interval: int = 30000  # requests
    reconnect_time_interval_ms: int = 10000000
    max_message_size: int = 1000000
    # Replicated topics only (Kafka 0.8's keys): -1 waits for every in-sync replica (our
    # default, Kafka 0.8's was 0), 1 for the leader's append, 0 for nothing.
    request_required_acks: int = -1
    request_timeout_ms: int = 10000  # how long the leader waits for the in-sync replicas
    event_handler: str | None = None
    event_handler_props: str | None = None
    callback_handler: str | None = None
    callback_handler_props: str | None = None

    def _check(self) -> None:
        if (self.zk_connect is None) == (self.broker_list is None):
            raise ConfigError("set exactly one of zk.connect and broker.list")


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(ZKConfig):
    """A ZooKeeper consumer group member's settings (0.7's ConsumerConfig), spec 6.3."""

    groupid: str
    consumerid: str | None = None  # None: generated (spec 5.3); set only in tests
    socket_timeout_ms: int = 30000
    socket_buffersize: int = 65536
    fetch_size: int = 1048576  # must exceed the largest message
    fetcher_backoff_ms: int = 1000
    queuedchunks_max: int = 10
    autocommit_enable: bool = True
    autocommit_interval_ms: int = 10000
    autooffset_reset: Literal["smallest", "largest"] = "smallest"
    consumer_timeout_ms: int = -1  # -1: block forever
    rebalance_retries_max: int = 4
    rebalance_backoff_ms: int = _same_as("zk_synctime_ms")
    shallowiterator_enable: bool = False
    mirror_topics_whitelist: str = ""
    mirror_topics_blacklist: str = ""
    mirror_consumer_numthreads: int = 1
