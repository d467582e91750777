"""Reading one planned range of a partition on an executor: fetches in, MessageColumns out.

How this works: a fetch thread asks the broker for ``[start, end)`` in chunks of at most
``fetch.size``, each chunk starting where the one before ended, and hands the answers over
through a queue of two; the caller's thread decodes one chunk into Arrow columns while the
next is on its way (socket reads release the GIL), so the broker's turn-around and the
transfer overlap the decoding instead of adding to it. Each fetch asks for no more than what
is left of the range, and the broker cuts its answer at a message boundary, so neighbouring
ranges never read an entry twice.

This broker ends every answer on a message boundary, so the fetch thread takes the next
offset to be the end of the answer, without walking it. A 0.7 broker's answers end in a
partial entry: the decoder, which walks every answer anyway, then finds fewer complete bytes
than were sent, and the fetch thread is restarted there in a mode that walks each answer's
length fields (``valid_bytes``) before asking for the next.

Anything unusual (an error code, an answer with no complete entry) stops the fetch thread;
the caller's thread deals with it on the same connection and, if the range goes on, starts
a new fetch thread after it:

- error 2 (this broker refuses a message that fails its CRC on disk; a 0.7 broker serves it
  and the decoder finds the mismatch): with ``crc=mark`` one row marked invalid, with no
  payload, and the read goes on at the next message start (found as planning.py finds split
  points); otherwise the query fails;
- no complete entry: a message larger than ``fetch.size`` (InvalidFetchSize), or, when less
  than ``fetch.size`` was left, a range end that is not a message start (NotAMessageBoundary:
  a false split point, see planning.py).

A replicated partition's range (``read_replicas``) is read from its replicas in the planned
order (leader, in-sync replicas, the others). Offsets are the same bytes on every replica,
so when the one being read stops answering (connection refused or lost, a timeout) or cannot
serve the range (WrongPartition: it holds no replica any more; OffsetOutOfRange; an empty
answer below the range's end: its high watermark is behind, as a new leader's is for a
moment) the read goes on *at the offset it reached* on the next one: the rows already handed
over are not read again and none is skipped. After a round in which none served, it pauses
(0.1 s doubling to 1 s) and tries the round again, until ``failover_timeout_ms`` passed
without progress; then ReplicasUnavailable names each replica's last failure and the task
fails. A replica's connection is given LEADER_CONNECT_TIMEOUT_MS (1 s), not the socket
timeout, since a dead broker's port refuses at once and BrokerConnection retries a refusal
until its connect timeout; a connection that hangs once open costs ``socket.timeout.ms``.

Blocking I/O, no Spark: the data source calls ``read_range`` or ``read_replicas`` from ``read``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from twisted_broker.client.errors import ReplicasUnavailable
from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.replicated_consumer import LEADER_CONNECT_TIMEOUT_MS
from twisted_broker.client.replicated_topics import LeaderBackoff
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.errors import InvalidFetchSize, InvalidMessage, OffsetOutOfRange, WrongPartition
from twisted_broker.spark import splits
from twisted_broker.spark.message_columns import MessageColumns, decode_message_set
from twisted_broker.spark.options import CRC_MARK
from twisted_broker.codec.kafka07.message_set import valid_bytes
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.codec.kafka07.responses import NO_ERROR

log = logging.getLogger(__name__)

PREFETCH_DEPTH = 2  # fetched chunks waiting to be decoded, at most (memory: 2 x fetch.size)
ReplicaAddress = tuple[int, str, int]  # broker id, host, port


class NotAMessageBoundary(InvalidMessage):
    """A range ends inside a message: its split point was not a real message start."""


class NothingServed(OffsetOutOfRange):
    """The broker answered nothing, without an error, before the range's end: a replica
    whose high watermark is behind the planned end (or a log replaced under the query)."""


# What makes read_replicas go on with the next replica rather than fail the task.
_REPLICA_REFUSALS = (OSError, WrongPartition, OffsetOutOfRange)


class _Done:
    """The fetch thread's last item: it stopped (range done, or an answer the caller handles)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class _FetchAhead:
    """A thread fetching ``[offset, end)`` ahead of the caller; iterate ``(offset, fetched)``.

    It stops after an answer with an error code or without a complete entry (which it still
    hands over), at ``end``, or when ``close`` is called; the consumer is free again once
    iteration ends or ``close`` returns.
    """

    def __init__(self, consumer: SimpleConsumer, topic: str, partition: int, offset: int, end: int,
                 fetch_bytes: int, walk: bool) -> None:
        self._consumer, self._topic, self._partition = consumer, topic, partition
        self._offset, self._end, self._fetch_bytes, self._walk = offset, end, fetch_bytes, walk
        self._queue: queue.Queue = queue.Queue(PREFETCH_DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fetch {topic}-{partition}", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            offset = self._offset
            while offset < self._end:
                request = FetchRequest(self._topic, self._partition, offset,
                                       min(self._fetch_bytes, self._end - offset))
                fetched = self._consumer.fetch(request)
                if fetched.error_code != NO_ERROR:
                    valid = 0
                elif self._walk:  # a broker whose answers end in a partial entry (0.7's)
                    valid = valid_bytes(fetched.message_set)
                else:  # this project's broker ends every answer on a boundary: no walk needed
                    valid = len(fetched.message_set)
                if not self._put((offset, fetched)) or not valid:
                    return
                offset += valid
            self._put(_Done())
        except BaseException as exc:  # handed to the caller's thread, which raises it
            self._put(_Done(exc))
        finally:
            self._put(_Done())  # harmless after the first: the caller stops at the first

    def __iter__(self) -> Iterator[tuple[int, FetchedMessageSet]]:
        while True:
            item = self._queue.get()
            if isinstance(item, _Done):
                if item.error is not None:
                    raise item.error
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def read_range(topic: str, broker_id: int, partition: int, host: str, port: int, start: int, end: int, *,
               fetch_bytes: int, crc: str, socket_timeout_ms: int, connect_timeout_ms: int | None = None,
               where: str | None = None) -> Iterator[MessageColumns]:
    """``[start, end)`` of ``topic`` partition ``partition`` on broker ``broker_id`` at
    ``host:port``: one MessageColumns per fetch, in log order.

    Raises OffsetOutOfRange (retention deleted the range meanwhile; NothingServed: the broker
    answered nothing before ``end``), InvalidFetchSize, NotAMessageBoundary, and the
    InvalidMessage errors of message_columns, each naming the topic and partition (as
    ``where`` says, by default ``<topic> <broker>-<partition>``). The connection is retried
    for ``connect_timeout_ms`` (default: ``socket_timeout_ms``).
    """
    where = where or f"{topic} {broker_id}-{partition}"
    offset = start
    walk = False  # until an answer ends in a partial entry
    with SimpleConsumer(host, port, socket_timeout_ms=socket_timeout_ms,
                        connect_timeout_ms=connect_timeout_ms) as consumer:
        while offset < end:
            ahead = _FetchAhead(consumer, topic, partition, offset, end, fetch_bytes, walk)
            unusual = None
            try:
                for fetch_offset, fetched in ahead:
                    if fetched.error_code != NO_ERROR:
                        unusual = fetched
                        break
                    columns = _decode(fetched, fetch_offset, crc, where)
                    if not columns.valid_bytes:
                        unusual = fetched
                        break
                    if columns.num_rows:
                        yield columns
                    offset = fetch_offset + columns.valid_bytes
                    if columns.valid_bytes != len(fetched.message_set) and not walk:
                        walk = True  # the fetch thread guessed the next offset wrong: restart it here
                        break
            finally:
                ahead.close()
            if unusual is not None:  # handled here, on the same connection
                offset = yield from _unusual_answer(consumer, unusual, fetch_offset, end, fetch_bytes=fetch_bytes,
                                                    crc=crc, where=where, broker_id=broker_id)


def read_replicas(topic: str, partition: int, replicas: Sequence[ReplicaAddress], start: int, end: int, *,
                  fetch_bytes: int, crc: str, socket_timeout_ms: int, failover_timeout_ms: int,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[MessageColumns]:
    """``[start, end)`` of a replicated topic's ``partition``, from the first of ``replicas``
    (``(broker id, host, port)``, in the order to ask them) that serves it, going on at the
    offset reached on the next one when it stops (module docstring): one MessageColumns per
    fetch, in log order, each message once.

    Raises ReplicasUnavailable after ``failover_timeout_ms`` without progress; OffsetOutOfRange
    at once when every replica reports the offset deleted (retention); otherwise as read_range.
    """
    offset = start
    failures: dict[int, str] = {}
    backoff = LeaderBackoff(100, 1000)
    deadline = None
    while True:
        deleted = []
        for broker_id, host, port in replicas:
            try:
                for columns in read_range(topic, broker_id, partition, host, port, offset, end,
                                          fetch_bytes=fetch_bytes, crc=crc, socket_timeout_ms=socket_timeout_ms,
                                          connect_timeout_ms=LEADER_CONNECT_TIMEOUT_MS,
                                          where=f"{topic} partition {partition}"):
                    if columns.num_rows:
                        offset = columns.next_offset[-1].as_py()  # a message boundary: where to go on
                        deadline = None
                        backoff.reset()
                    yield columns
                return
            except _REPLICA_REFUSALS as exc:
                if isinstance(exc, OffsetOutOfRange) and not isinstance(exc, NothingServed):
                    deleted.append(exc)
                failures[broker_id] = f"broker {broker_id} ({host}:{port}): {exc}"
                log.info("%s partition %d at offset %d: %s; trying the next replica", topic, partition, offset, exc)
        if len(deleted) == len(replicas):
            raise deleted[0]
        now = clock()
        deadline = now + failover_timeout_ms / 1000 if deadline is None else deadline
        if now >= deadline:
            raise ReplicasUnavailable(
                f"{topic} partition {partition}: no replica served offsets [{offset}, {end}) for "
                f"{failover_timeout_ms} ms (failover.timeout.ms): {'; '.join(failures.values())}")
        sleep(backoff.next_pause_s(deadline - now))


def _decode(fetched: FetchedMessageSet, offset: int, crc: str, where: str) -> MessageColumns:
    try:
        return decode_message_set(fetched.message_set, offset, crc=crc)
    except InvalidMessage as exc:
        raise type(exc)(exc.position, f"{where}: {exc.reason}") from None


def _unusual_answer(consumer: SimpleConsumer, fetched: FetchedMessageSet, offset: int, end: int, *,
                    fetch_bytes: int, crc: str, where: str, broker_id: int) -> Iterator[MessageColumns]:
    """Deal with an error code or an answer without a complete entry; return where to go on."""
    try:
        fetched.check()
    except OffsetOutOfRange:
        raise OffsetOutOfRange(f"{where}: offset {offset} is no longer on broker {broker_id} ({consumer.host}:"
                               f"{consumer.port}); retention deleted it while the query ran?") from None
    except InvalidMessage:
        if crc != CRC_MARK:
            raise InvalidMessage(offset, f"{where}: broker {broker_id} reports the message at this offset "
                                         "damaged on disk (crc=mark loads past it, as a row marked invalid)") from None
        following = _after_damaged_message(consumer, fetched.topic, fetched.partition, offset, end, fetch_bytes, where)
        yield MessageColumns(pa.array([offset], pa.int64()), pa.array([following], pa.int64()),
                             pa.nulls(1, pa.binary()), pa.array([False]), crc_failures=1)
        return following
    if not fetched.message_set:
        raise NothingServed(f"{where}: broker {broker_id} answered nothing at offset {offset}, before the "
                               f"planned end {end}")
    if end - offset < fetch_bytes:
        raise NotAMessageBoundary(end, f"{where}: a message starting before offset {end} runs past it, so a split "
                                       "point was not a message start (a payload holding a message set?); "
                                       "set split.size=0")
    raise InvalidFetchSize(f"{where}: the message at offset {offset} is larger than fetch.size={fetch_bytes}; "
                           "raise fetch.size")


def _after_damaged_message(consumer: SimpleConsumer, topic: str, partition: int, offset: int, end: int,
                           fetch_bytes: int, where: str) -> int:
    """Where the next message starts after the damaged one at ``offset``.

    The broker will not serve the damaged bytes as a message, but raw bytes from ``offset +
    1`` on: the next start is found there as split points are, or is ``end`` if the damaged
    message is the last before it. Raises InvalidMessage if neither can be established.
    """
    found, covered = splits.probe_message_start(
        consumer, topic, partition, offset + 1, limit=end,
        probe_bytes=sorted({min(splits.SPLIT_PROBE_BYTES, fetch_bytes), fetch_bytes}))
    if found is not None:
        return found
    if covered:
        return end
    raise InvalidMessage(offset, f"{where}: the message at this offset is damaged on disk and the next "
                                 "message start cannot be found after it")
