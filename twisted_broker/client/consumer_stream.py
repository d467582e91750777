"""The consumer side of a group member's partitions: KafkaStream, the blocking iterator the
user reads (0.7's KafkaStream and ConsumerIterator), and what it iterates over:
PartitionTopicInfo (one owned partition's offsets) and FetchedDataChunk (what a fetcher
thread queues for a stream).

Iterating a stream takes chunks from its bounded queue and yields their messages; handing a
message to the user advances the partition's consumed offset to that message's
``next_offset`` (spec 3.5). The connector (client/zookeeper_consumer.py) deactivates a
partition and drops its queued chunks under the stream's lock before it commits and releases
the partition, so no message of a released partition reaches the user after the commit.

Threads: the user's (iterating; a stream may be shared by threads), the fetcher threads
(client/consumer_fetcher.py, queueing chunks), the connector's (clearing, shutting down).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import NamedTuple

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.replicated_topics import LEADERS
from twisted_broker.errors import CrcMismatch, InvalidMessage
from twisted_broker.registry import paths
from twisted_broker.codec.kafka07.message import Message

log = logging.getLogger(__name__)

_PUT_POLL_S = 0.1  # a fetcher blocked on a full queue checks this often whether it must stop


class ConsumerTimeout(Exception):
    """No message arrived within ``consumer.timeout.ms``; the stream can be iterated again."""


class MessageAndMetadata(NamedTuple):
    """One consumed message. ``offset`` is where its entry starts (for a message inside a
    compressed wrapper, the wrapper's), ``next_offset`` where consumption resumes after it
    (spec 3.5): committing after this message writes ``next_offset``.

    Immutable, as 0.7's case class. A named tuple, not a frozen dataclass: one is made per
    message, and a frozen dataclass's six ``object.__setattr__`` calls cost 550 ns against
    230 here, a quarter of the stream's whole per-message cost.
    """

    topic: str
    partition: str  # <brokerId>-<partId>; <partId> alone for a replicated topic
    offset: int
    next_offset: int
    payload: bytes
    message: Message

    @property
    def broker_id(self) -> int:
        return split_partition_name(self.partition)[0]

    @property
    def partition_id(self) -> int:
        return split_partition_name(self.partition)[1]


def split_partition_name(name: str) -> tuple[int, int]:
    """``(broker id, partition)`` of a group's partition name: 0.7's ``<b>-<p>``, or a
    replicated topic's bare ``<p>`` (Kafka 0.8's naming), whose broker is LEADERS.
    Raises ValueError for anything else."""
    if name.isascii() and name.isdigit():
        return LEADERS, int(name)
    return paths.parse_partition_name(name)


class PartitionTopicInfo:
    """One partition this consumer owns: where its fetcher reads next, what the user has
    consumed, what was last committed. Deactivated for good when the partition is released."""

    __slots__ = ("topic", "partition", "broker_id", "partition_id", "thread_id", "stream",
                 "fetch_offset", "consumed_offset", "committed_offset", "active", "fetching")

    def __init__(self, topic: str, partition: str, thread_id: str, stream: "KafkaStream",
                 offset: int | None, committed_offset: int | None) -> None:
        self.topic, self.partition, self.thread_id, self.stream = topic, partition, thread_id, stream
        self.broker_id, self.partition_id = split_partition_name(partition)
        self.fetch_offset = offset  # None: resolved by autooffset.reset before the first fetch
        self.consumed_offset = offset
        self.committed_offset = committed_offset
        self.active = True  # False once released: nothing of it may reach the user any more
        self.fetching = True  # False after an error the fetcher cannot get past

    def __repr__(self) -> str:
        return (f"{self.topic}:{self.partition}: fetched offset {self.fetch_offset}, consumed "
                f"offset {self.consumed_offset}, owner {self.thread_id}")



class FetchedDataChunk:
    """What a fetcher hands a stream: a fetched set, or the error that stopped a partition."""

    __slots__ = ("info", "message_set", "fetch_offset", "error")

    def __init__(self, info: PartitionTopicInfo, message_set: FetchedMessageSet | None,
                 fetch_offset: int, error: Exception | None = None) -> None:
        self.info, self.message_set, self.fetch_offset, self.error = info, message_set, fetch_offset, error


_SHUTDOWN = object()  # the queue item that ends iteration (0.7's shutdownCommand)


class KafkaStream:
    """A blocking iterator over the messages of the partitions assigned to one stream.

    It never ends while the connector runs: ``next()`` waits for data, or raises
    ConsumerTimeout after ``consumer.timeout.ms`` (>= 0) without a message (the stream stays
    usable). After the connector's shutdown() it raises StopIteration. A message failing its
    CRC raises CrcMismatch; the next call goes on with the message after it. Thread-safe.
    """

    def __init__(self, *, max_chunks: int, consumer_timeout_ms: int, shallow: bool) -> None:
        self._queue: queue.Queue = queue.Queue(max(max_chunks, 1))
        self._timeout_s = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000
        self._shallow = shallow
        self._lock = threading.Lock()
        self._chunk: FetchedDataChunk | None = None
        self._messages: Iterator[tuple[int, int, Message]] | None = None
        self._done = False

    def __iter__(self) -> "KafkaStream":
        return self

    def __next__(self) -> MessageAndMetadata:
        """The next message (user's thread). Raises ConsumerTimeout, StopIteration after
        shutdown, the error a fetch of one of its partitions met (OffsetOutOfRange cannot be
        among them: it is handled by autooffset.reset), or an InvalidMessage subclass."""
        while True:
            with self._lock:
                if self._done:
                    raise StopIteration
                if self._chunk is not None:
                    message = self._next_in_chunk()
                    if message is not None:
                        return message
            try:
                chunk = self._queue.get(timeout=self._timeout_s)
            except queue.Empty:
                raise ConsumerTimeout(f"no message within {self._timeout_s * 1000:.0f} ms") from None
            with self._lock:
                if chunk is _SHUTDOWN:
                    self._done = True
                    self._offer(_SHUTDOWN)  # for other threads waiting on this stream
                    raise StopIteration
                if self._done or not chunk.info.active:
                    continue  # fetched for a partition released since
                self._start_chunk(chunk)

    def _start_chunk(self, chunk: FetchedDataChunk) -> None:
        if chunk.error is not None:
            raise chunk.error
        info = chunk.info
        if info.consumed_offset != chunk.fetch_offset:
            log.error("consumed offset %s doesn't match fetch offset %d for %r; consumer may lose data",
                      info.consumed_offset, chunk.fetch_offset, info)
            info.consumed_offset = chunk.fetch_offset
        self._chunk = chunk
        self._messages = chunk.message_set.iter_entries() if self._shallow else iter(chunk.message_set)

    def _next_in_chunk(self) -> MessageAndMetadata | None:
        info = self._chunk.info
        if not info.active:
            self._chunk = self._messages = None
            return None
        try:
            item = next(self._messages, None)
        except InvalidMessage:
            self._chunk = self._messages = None  # the rest of this set cannot be walked
            raise
        if item is None:
            self._chunk = self._messages = None
            return None
        offset, next_offset, message = item
        if not message.is_valid():
            raise CrcMismatch(offset, f"message of {info.topic}:{info.partition} at offset {offset} fails its CRC")
        info.consumed_offset = next_offset
        payload = message.payload
        if type(payload) is not bytes:  # a shallow iterator's view; the deep one gives bytes
            payload = bytes(payload)
        return MessageAndMetadata(info.topic, info.partition, offset, next_offset, payload, message)

    # -- the connector's and the fetchers' side --------------------------------------------------

    def _put(self, chunk: FetchedDataChunk, stopped: threading.Event) -> bool:
        """Queue a chunk, waiting while the queue is full (fetcher thread). False if the
        fetcher was stopped before there was room."""
        while not stopped.is_set():
            try:
                self._queue.put(chunk, timeout=_PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _clear(self, infos: list[PartitionTopicInfo]) -> None:
        """Deactivate ``infos`` (this stream's) and drop every queued or current chunk. After
        this returns, no message of them reaches the user, so their consumed offsets are final."""
        with self._lock:
            for info in infos:
                info.active = False
            self._chunk = self._messages = None
            self._drain()

    def _shut_down(self, infos: list[PartitionTopicInfo]) -> None:
        """_clear, then end iteration for every thread using this stream."""
        with self._lock:
            for info in infos:
                info.active = False
            self._chunk = self._messages = None
            self._done = True
            self._drain()
            self._offer(_SHUTDOWN)

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _offer(self, item: object) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            pass  # the queue holds items already: a waiting thread is not blocked
