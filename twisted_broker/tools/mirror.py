"""``mirror``: copy the topics a filter allows from one cluster to another (0.7's MirrorMaker).

How this works. Each of ``--streams`` threads runs a ZooKeeper consumer connector of its own
in group ``--group`` on the source cluster, subscribed by ``--whitelist``/``--blacklist`` with
one stream, and iterating it **shallowly** (``shallowiterator.enable``): a compressed wrapper
arrives as the one top-level message it is, never decompressed. Each entry is re-framed
exactly as it was stored (length, magic, attributes, CRC, payload) and appended to a message
set for its topic and source partition; a set is sent with one Produce request when it
holds ``--batch-size`` entries, or when no message came for ``POLL_MS``. The target broker
stores the bytes unchanged (spec 3.4), so wrappers cross byte for byte: nothing is
decompressed, recompressed or re-checksummed.

Where an entry goes on the target: one of the target's partitions of its topic (from its
ZooKeeper registry), picked by a hash of the source partition's name, so one source
partition's messages stay in order on one target partition. With ``--to-broker-list`` the
hash picks a listed broker, which picks the partition itself (0.7's partition -1).
A replicated target topic (its metadata says so; asking creates a new one where the target's
default.replication.factor is above 1) takes target partition ``hash % N`` of its 0..N-1,
sent to that partition's leader with acks from every in-sync replica, following leader changes
(client/leader_sender.py). Replicated source topics are read from their leaders by the group
consumer.

Offsets: each thread commits its connector's consumed offsets itself, at most every
``COMMIT_INTERVAL_S`` and only right after its sends, so a committed offset never covers an
unsent message (at least once: a crash replays at most what was sent since the last
commit). One connector per stream, rather than 0.7's one with many streams, is what lets each
thread commit only what it has sent; the group balances streams either way (spec 5.5).

The mirror runs until interrupted (SIGINT or SIGTERM: every thread sends what it holds,
commits and leaves the group), until ``--timeout-ms`` passes without a message, or until a
send fails, which stops every thread and exits with status 1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
import zlib

from twisted_broker.client.broker_partition_info import ConfigBrokerPartitionInfo
from twisted_broker.client.leader_sender import LeaderSender
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.client.topic_filter import Blacklist, TopicFilter, Whitelist
from twisted_broker.config import ConsumerConfig
from twisted_broker.errors import CrcMismatch
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.progress import Progress
from twisted_broker.codec.kafka07.primitives import INT32

log = logging.getLogger(__name__)

HELP = "copy topics from one cluster to another, compressed messages unchanged (MirrorMaker)"
DEFAULT_GROUP = "twisted-broker-mirror"
DEFAULT_BATCH = 200
POLL_MS = 100  # a stream gives up waiting this often, so partial batches go out
COMMIT_INTERVAL_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-zk", type=cluster.zk_connect, required=True, metavar="HOST:PORT[,...]",
                        help="ZooKeeper of the source cluster")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-zk", type=cluster.zk_connect, metavar="HOST:PORT[,...]",
                        help="ZooKeeper of the target cluster")
    target.add_argument("--to-broker-list", type=cluster.broker_list, metavar="ID:HOST:PORT[,...]",
                        help="the target cluster's brokers")
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--whitelist", metavar="REGEX", help="mirror the topics this regex matches whole "
                                                             "(a,b means a or b)")
    topics.add_argument("--blacklist", metavar="REGEX", help="mirror every topic this regex does not match")
    parser.add_argument("--streams", type=cluster.positive_int, default=1, metavar="N",
                        help="consumer streams (threads) in the mirror's group (default 1)")
    parser.add_argument("--group", default=DEFAULT_GROUP, metavar="G",
                        help=f"consumer group on the source cluster (default {DEFAULT_GROUP})")
    parser.add_argument("--batch-size", type=cluster.positive_int, default=DEFAULT_BATCH, metavar="N",
                        help=f"top-level messages per produce request, at most (default {DEFAULT_BATCH})")
    parser.add_argument("--timeout-ms", type=cluster.non_negative_int, metavar="MS",
                        help="stop when no message came for MS ms (default: run until interrupted)")


def entry_bytes(message) -> bytes:
    """A message re-framed as a message-set entry, its stored bytes unchanged."""
    body = message.encode()
    return INT32.pack(len(body)) + body


def target_index(topic: str, source_partition: str, count: int) -> int:
    """Which of ``count`` target partitions a source partition's messages go to (stable)."""
    return zlib.crc32(f"{topic}/{source_partition}".encode()) % count


class MirrorTarget:
    """The target cluster: where a topic's messages go, and a SyncProducer per broker there."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._registry = None  # the ZooKeeper-backed info, which must be closed
        if args.to_zk is not None:
            from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo  # loads kazoo
            try:
                self._info = self._registry = ZkBrokerPartitionInfo(args.to_zk)
            except RuntimeError as exc:
                raise CommandError(str(exc)) from None
        else:
            self._info = ConfigBrokerPartitionInfo(cluster.broker_list_text(args.to_broker_list))
        self._producers: dict[tuple[str, int], SyncProducer] = {}
        self._lock = threading.Lock()
        self._leaders = LeaderSender(lambda _broker_id, address: self._producer(address),
                                     lambda: self._info.brokers().items())

    def send(self, topic: str, source_partition: str, message_set: bytes) -> None:
        """Send one message set to the target partition of ``source_partition``.

        Raises CommandError when the target has no broker for the topic, ConnectionError and
        the SyncProducer's other errors when the send fails.
        """
        replicated = None if self._registered_0_7(topic) else self._leaders.topic(topic)
        if replicated is not None:
            partition = target_index(topic, source_partition, replicated.partition_count)
            self._leaders.send([(topic, partition, message_set)])
            return
        partitions = self._info.partitions(topic)
        if not partitions:
            raise CommandError(f"the target cluster has no live broker for topic {topic}")
        broker_id, partition = partitions[target_index(topic, source_partition, len(partitions))]
        try:
            address = self._info.broker(broker_id)
        except KeyError:
            raise ConnectionError(f"target broker {broker_id} is no longer registered") from None
        self._producer(address).send(topic, partition, message_set)

    def _registered_0_7(self, topic: str) -> bool:
        return self._registry is not None and self._registry.registered_0_7(topic)

    def _producer(self, address: tuple[str, int]) -> SyncProducer:
        address = tuple(address)
        with self._lock:
            producer = self._producers.get(address)
            if producer is None:
                producer = self._producers[address] = SyncProducer(*address)
            return producer

    def close(self) -> None:
        for producer in self._producers.values():
            producer.close()
        if self._registry is not None:
            self._registry.close()


class MirrorThread(threading.Thread):
    """One stream: a connector of its own on the source, its batches, its commits."""

    def __init__(self, index: int, args: argparse.Namespace, topic_filter: TopicFilter, target: MirrorTarget,
                 stop: threading.Event, progress: Progress, progress_lock: threading.Lock) -> None:
        super().__init__(name=f"mirror-{index}", daemon=True)
        self._args, self._filter, self._target, self._stopping = args, topic_filter, target, stop
        self._progress, self._progress_lock = progress, progress_lock
        self._batches: dict[tuple[str, str], list[bytes]] = {}
        self._pending = 0
        self._last_commit = time.monotonic()
        self.error: BaseException | None = None
        self.skipped = 0
        self.last_message: float | None = None  # set once the stream is ready: joining is not idling

    def run(self) -> None:
        from twisted_broker.client.zookeeper_consumer import ConsumerTimeout, ZookeeperConsumerConnector  # kazoo
        args = self._args
        connector = None
        try:
            config = ConsumerConfig(zk_connect=args.from_zk, groupid=args.group, shallowiterator_enable=True,
                                    autocommit_enable=False, consumer_timeout_ms=POLL_MS)
            connector = ZookeeperConsumerConnector(config)
            (stream,) = connector.create_message_streams_by_filter(self._filter, 1)
            self.last_message = time.monotonic()
            while not self._stopping.is_set():
                try:
                    message = next(stream)
                except ConsumerTimeout:
                    self._send_all(connector)
                    continue
                except StopIteration:
                    break
                except CrcMismatch as exc:  # the stream goes on after it; other damage stops us
                    log.error("skipping a corrupt message: %s", exc)
                    self.skipped += 1
                    continue
                self.last_message = time.monotonic()
                batch = self._batches.setdefault((message.topic, message.partition), [])
                batch.append(entry_bytes(message.message))
                self._pending += 1
                if len(batch) >= args.batch_size:
                    self._send_all(connector)
            self._send_all(connector, commit=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread, which stops the others
            self.error = exc
            self._stopping.set()
        finally:
            if connector is not None:
                connector.shutdown()  # autocommit is off: commits nothing unsent

    def _send_all(self, connector, commit: bool = False) -> None:
        """Send every batch held, then commit if due (or ``commit``): all consumed is sent."""
        for (topic, partition), batch in self._batches.items():
            if batch:
                self._target.send(topic, partition, b"".join(batch))
                batch.clear()
        if self._pending:
            with self._progress_lock:
                self._progress.add(self._pending)
            self._pending = 0
        now = time.monotonic()
        if commit or now - self._last_commit >= COMMIT_INTERVAL_S:
            connector.commit_offsets()
            self._last_commit = now


def run(args: argparse.Namespace) -> int:
    try:  # a bad regex is the user's to fix: say so before any thread starts
        topic_filter = Whitelist(args.whitelist) if args.whitelist is not None else Blacklist(args.blacklist)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    target: MirrorTarget | None = None
    threads: list[MirrorThread] = []
    try:
        target = MirrorTarget(args)
        with Progress("mirror") as progress:
            lock = threading.Lock()
            threads = [MirrorThread(index, args, topic_filter, target, stop, progress, lock)
                       for index in range(args.streams)]
            for thread in threads:
                thread.start()
            try:
                while not stop.wait(POLL_MS / 1000):
                    with lock:
                        progress.tick()
                    if not any(thread.is_alive() for thread in threads):
                        break
                    if args.timeout_ms is not None and _idle_ms(threads) >= args.timeout_ms:
                        break
            except KeyboardInterrupt:
                pass
            stop.set()
            for thread in threads:
                thread.join()
    finally:
        stop.set()
        if target is not None:
            target.close()
        signal.signal(signal.SIGTERM, previous)
    errors = [thread.error for thread in threads if thread.error is not None]
    if errors:
        error = errors[0]
        if isinstance(error, CommandError):
            raise error
        raise CommandError(f"mirroring stopped: {type(error).__name__}: {error}")
    skipped = sum(thread.skipped for thread in threads)
    if skipped:
        raise CommandError(f"{skipped} corrupt messages were skipped")
    return 0


def _idle_ms(threads: list[MirrorThread]) -> float:
    """Time since the last message of any thread; 0 while a thread is still joining the group."""
    last = [thread.last_message for thread in threads if thread.is_alive()]
    if not last or None in last:
        return 0.0
    return (time.monotonic() - max(last)) * 1000


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
