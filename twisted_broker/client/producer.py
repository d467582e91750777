"""Producer: 0.7's high-level ``kafka.producer.Producer``, configured by a ProducerConfig.

``send(topic, messages, key)`` encodes the messages (serializer.class), picks where they go
(spec 5.6), and either sends them at once (``producer.type=sync``: one Produce request) or
queues them for the send thread (``async``: batched MultiProduce per broker, async_producer.py).
All messages of one send go to the same partition, as one 0.7 ProducerData does.

Where they go comes from a BrokerPartitionInfo (broker_partition_info.py):

- ``broker.list``: a random listed broker, partition -1 (the broker picks); the key is not
  used, and ``partitioner.class`` may not be set, as in 0.7;
- ``zk.connect``: the caller passes the ZooKeeper-backed BrokerPartitionInfo; the partition is
  ``partitioner(key, n)`` over the sorted ``(broker, partition)`` list, or random for a None
  key. When the chosen broker is not known, the info is refreshed and the choice made again,
  up to ``zk.read.num.retries`` times.

Compression: ``compression.codec`` applies to the topics in ``compressed.topics``, or to all
topics when that list is empty; each topic-partition batch becomes one wrapper message. 0.7.2's
sync path ignored ``compressed.topics`` and compressed every topic; here both paths honour it.
One SyncProducer per broker is made on first use and kept until close().

Replicated topics (docs/replication.md): the first send to a topic asks a broker its metadata
(client/replicated_topics.py), which creates an unknown topic when the brokers'
``default.replication.factor`` is above 1. A 0.7 topic (error 3, or a broker that is not
ours) takes the path above, unchanged. A replicated topic's partitions are 0..N-1 (no broker
in the name): ``partitioner(key, N)``, or random for a None key, in both modes. Each send is a
ProduceAck request to the partition's leader with ``request.required.acks`` and
``request.timeout.ms``; error 6 (not leader), 3, 7 (timed out) or a lost connection refresh the
metadata and send again, waiting while the partition has no leader, for up to
``socket.timeout.ms`` in all. Delivery is at least once: a set the old leader appended before
it died may be sent again to the new one. Error 19/20 (fewer in-sync replicas than
``min.insync.replicas``) raises NotEnoughReplicas(AfterAppend) at once, naming the partition
and its ISR. In async mode the send thread does the same per batch, and
``num.retries`` resends a batch that failed.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted_broker.client.async_producer import AfterSend, AsyncProducer, BeforeSend, QueueItem
from twisted_broker.client.broker_partition_info import BrokerPartitionInfo, ConfigBrokerPartitionInfo
from twisted_broker.client.encoders import Encoder, load_encoder
from twisted_broker.client.errors import InvalidPartition, NoBrokersForPartition, ProducerClosed
from twisted_broker.client.partitioners import JAVA_PARTITIONERS, Partitioner, load_partitioner
from twisted_broker.client.leader_sender import LeaderSender
from twisted_broker.client.replicated_topics import LEADERS, Address, ReplicatedTopic
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.config import ConfigError, ProducerConfig
from twisted_broker.errors import MessageSizeTooLarge
from twisted_broker.codec.kafka07.compression import NO_COMPRESSION
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set

log = logging.getLogger(__name__)

# sync_producer_factory(broker_id, host, port): a SyncProducer or anything with its send,
# multi_send and close (tests pass fakes).
SyncProducerFactory = Callable[[int, str, int], SyncProducer]


class Producer:
    """Sends messages to topics as ``config`` says; thread-safe. Close it when done: in async
    mode, messages still queued are sent by close() and lost without it."""

    def __init__(self, config: ProducerConfig, *,
                 broker_partition_info: BrokerPartitionInfo | None = None,
                 encoder: Encoder | None = None, partitioner: Partitioner | None = None,
                 before_send: BeforeSend | None = None, after_send: AfterSend | None = None,
                 sync_producer_factory: SyncProducerFactory | None = None,
                 rng: random.Random | None = None) -> None:
        """Raises ConfigError for a combination 0.7 refuses; ValueError for a bad broker.list
        or class name. With ``zk.connect`` and no ``broker_partition_info`` the producer
        watches ZooKeeper's registry itself (and closes that view in ``close()``)."""
        self._owned_info = None
        if broker_partition_info is None:
            if config.broker_list is not None:
                broker_partition_info = ConfigBrokerPartitionInfo(config.broker_list)
            else:
                # Imported here: the registry view pulls in kazoo, which broker.list users skip.
                from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo
                broker_partition_info = self._owned_info = ZkBrokerPartitionInfo.from_config(config)
        # 0.7 in broker.list mode: a random broker, partition -1, the key unused.
        self._random_broker = config.broker_list is not None
        if self._random_broker and (partitioner is not None
                                    or config.partitioner_class not in JAVA_PARTITIONERS):
            raise ConfigError("partitioner.class cannot be used together with broker.list")
        if config.event_handler or config.callback_handler:
            log.warning("event.handler and callback.handler name Java classes; pass before_send "
                        "and after_send callables to Producer instead (ignored)")
        if config.request_required_acks not in (-1, 0, 1):
            raise ConfigError(f"request.required.acks must be -1, 0 or 1, not {config.request_required_acks}")
        self._config = config
        self._info = broker_partition_info
        self._leaders = LeaderSender(self._sync_producer_at, self._metadata_candidates,
                                     required_acks=config.request_required_acks,
                                     timeout_ms=config.request_timeout_ms,
                                     give_up_after_ms=config.socket_timeout_ms)
        self._encoder = load_encoder(encoder if encoder is not None else config.serializer_class)
        self._partitioner = load_partitioner(partitioner if partitioner is not None else config.partitioner_class)
        self._compressed_topics = frozenset(config.compressed_topics)
        self._rng = rng or random.Random()
        self._make_sync_producer = sync_producer_factory or self._default_sync_producer
        self._sync_producers: dict[int, tuple[tuple[str, int], SyncProducer]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._async: AsyncProducer | None = None
        if config.producer_type == "async":
            self._async = AsyncProducer(
                self._send_to_broker, queue_size=config.queue_size,
                enqueue_timeout_ms=config.queue_enqueue_timeout_ms, batch_size=config.batch_size,
                queue_time_ms=config.queue_time, num_retries=config.num_retries,
                before_send=before_send, after_send=after_send)
        elif before_send is not None or after_send is not None:
            raise ConfigError("before_send and after_send apply to producer.type=async only")

    def send(self, topic: str, messages: Sequence[Any], key: Any = None) -> None:
        """Send ``messages`` (values for the encoder) to one partition of ``topic``.

        Sync: returns once the Produce request is written. Async: returns once the messages are
        queued. Raises MessageSizeTooLarge (a payload over max.message.size, nothing sent or
        queued), NoBrokersForPartition, InvalidPartition, ProducerClosed; sync mode also
        ConnectionError/TimeoutError; async mode QueueFull.
        """
        if self._closed:
            raise ProducerClosed("the producer is closed")
        payloads = [self._encoder(message) for message in messages]
        limit = self._config.max_message_size
        position = 0  # of the message in the (uncompressed) set, for the error
        for payload in payloads:
            if len(payload) > limit:
                raise MessageSizeTooLarge(position, len(payload), limit)
            position += 10 + len(payload)
        if not payloads:
            return
        replicated = self._replicated(topic)
        if replicated is not None:
            partition = self._choose_replicated_partition(replicated, key)
            if self._async is not None:
                self._async.enqueue([QueueItem(topic, LEADERS, partition, bytes(payload)) for payload in payloads])
            else:
                self._leaders.send([(topic, partition, self._message_set(topic, payloads))])
            return
        broker_id, partition = self._choose_partition(topic, key)
        if self._async is not None:
            # bytes, not the caller's bytearray: it could change while the message waits. A
            # list, not a generator: this runs once per message sent.
            self._async.enqueue([QueueItem(topic, broker_id, partition, bytes(payload)) for payload in payloads])
        else:
            self._sync_producer(broker_id).send(topic, partition, self._message_set(topic, payloads))

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued (async), then close every connection. Idempotent.

        Raises TimeoutError if the async queue is not sent within ``timeout_s`` (None: wait).
        """
        self._closed = True
        try:
            if self._async is not None:
                self._async.close(timeout_s)
        finally:
            with self._lock:
                producers, self._sync_producers = list(self._sync_producers.values()), {}
            for _address, producer in producers:
                producer.close()
            if self._owned_info is not None:
                self._owned_info.close()
                self._owned_info = None

    def _choose_partition(self, topic: str, key: Any) -> tuple[int, int]:
        attempts = 1 + max(self._config.zk_read_num_retries, 0)
        for attempt in range(attempts):
            partitions = self._info.partitions(topic)
            if partitions:
                count = len(partitions)
                if self._random_broker or key is None:
                    index = self._rng.randrange(count) if count > 1 else 0  # one broker: no draw
                else:
                    index = self._partitioner(key, count)
                    if not 0 <= index < count:
                        raise InvalidPartition(f"partitioner returned {index} for {count} partitions of {topic}")
                broker_id, partition = partitions[index]
                try:
                    self._info.broker(broker_id)
                    return broker_id, partition
                except KeyError:
                    pass
            if attempt + 1 < attempts:
                self._info.refresh()
        raise NoBrokersForPartition(f"no live broker for topic {topic} after {attempts} attempts")

    # -- replicated topics -----------------------------------------------------------------

    def _replicated(self, topic: str) -> ReplicatedTopic | None:
        """The topic's metadata; None for a 0.7 topic. A topic registered under
        /brokers/topics is 0.7 without asking (no metadata request on 0.7's path)."""
        if not hasattr(self._info, "brokers"):
            return None  # an info that cannot list its brokers (a stand-in) knows 0.7 topics only
        registered = getattr(self._info, "registered_0_7", None)
        if registered is not None and registered(topic):
            return None
        if not self._info.brokers():
            return None  # nobody to ask: 0.7's path says NoBrokersForPartition
        return self._leaders.topic(topic)

    def _choose_replicated_partition(self, topic: ReplicatedTopic, key: Any) -> int:
        count = topic.partition_count
        if key is None:
            return self._rng.randrange(count) if count > 1 else 0
        index = self._partitioner(key, count)
        if not 0 <= index < count:
            raise InvalidPartition(f"partitioner returned {index} for {count} partitions of {topic.topic}")
        return index

    def _metadata_candidates(self) -> list[tuple[int, Address]]:
        """The brokers a metadata question may go to: the registry's (or broker.list's)."""
        return list(self._info.brokers().items())

    def _message_set(self, topic: str, payloads: Iterable[bytes]) -> bytes:
        codec = self._config.compression_codec
        if codec != NO_COMPRESSION and self._compressed_topics and topic not in self._compressed_topics:
            codec = NO_COMPRESSION
        return encode_compressed_message_set(payloads, codec)

    def _send_to_broker(self, broker_id: int, produces: list[tuple[str, int, list[bytes]]]) -> None:
        """The async send thread's MultiProduce to one broker (LEADERS: to the leaders)."""
        if broker_id == LEADERS:
            self._leaders.send([(topic, partition, self._message_set(topic, payloads))
                                for topic, partition, payloads in produces])
            return
        self._sync_producer(broker_id).multi_send(
            (topic, partition, self._message_set(topic, payloads)) for topic, partition, payloads in produces)

    def _sync_producer(self, broker_id: int) -> SyncProducer:
        try:
            address = self._info.broker(broker_id)
        except KeyError:
            raise NoBrokersForPartition(f"broker {broker_id} is not registered") from None
        return self._sync_producer_at(broker_id, address)

    def _sync_producer_at(self, broker_id: int, address: Address) -> SyncProducer:
        address = tuple(address)
        stale = None
        with self._lock:
            known_address, producer = self._sync_producers.get(broker_id, (None, None))
            if known_address != address:
                # New, or the broker registered again at another address (ZooKeeper mode).
                stale = producer
                producer = self._make_sync_producer(broker_id, *address)
                self._sync_producers[broker_id] = (address, producer)
        if stale is not None:
            stale.close()
        return producer

    def _default_sync_producer(self, broker_id: int, host: str, port: int) -> SyncProducer:
        config = self._config
        return SyncProducer(host, port, buffer_size=config.buffer_size,
                            connect_timeout_ms=config.connect_timeout_ms,
                            socket_timeout_ms=config.socket_timeout_ms,
                            reconnect_interval=config.reconnect_interval,
                            reconnect_time_interval_ms=config.reconnect_time_interval_ms,
                            max_message_size=config.max_message_size)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
