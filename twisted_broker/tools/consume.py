"""``consume``: a topic's messages to stdout, one payload per line (0.7's console consumer).

Two ways to read:

- ``--group G`` (not with ``--broker-list``): as a member of consumer group G, through the ZooKeeper
  consumer connector: partitions shared with the group's other members, starting from the
  group's committed offsets (a partition without one starts at the earliest offset, 0.7's
  ``autooffset.reset=smallest``), and the offsets consumed committed on exit (SIGTERM too);
- otherwise directly, with no group and nothing committed: every partition of the topic (or
  the one ``--partition`` names) from the latest offset (new messages only, as the console
  consumer without a group), the earliest (``--from-beginning``) or a byte offset
  (``--offset``, one partition). One MultiFetch per broker per round; a round that brings
  nothing waits ``--backoff-ms`` before the next.

Each payload is written followed by ``\\n``; with ``--binary``, as a 4-byte big-endian length
and the bytes (what ``produce --binary`` reads), which survives payloads that hold newlines.
``--max-messages`` stops after that many; ``--timeout-ms`` stops once no message has come for
that long (0.7's ``consumer.timeout.ms``). Both exit with status 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.replicated_consumer import ReplicatedConsumer
from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME
from twisted_broker.config import ConsumerConfig
from twisted_broker.errors import InvalidFetchSize, InvalidMessage, KafkaError, OffsetOutOfRange
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError, UsageError
from twisted_broker.tools.progress import Progress
from twisted_broker.codec.kafka07.primitives import INT32
from twisted_broker.codec.kafka07.requests import FetchRequest

HELP = "print a topic's messages, one per line (console consumer)"
DEFAULT_FETCH_BYTES = 1024 * 1024  # 0.7's fetch.size
DEFAULT_BACKOFF_MS = 100
GROUP_POLL_MS = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser)
    cluster.add_topic_argument(parser)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--group", metavar="G",
                       help="read as a member of ZooKeeper consumer group G (not with --broker-list), from its "
                            "committed offsets (earliest where none), committing on exit")
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default without --group: the latest)")
    start.add_argument("--offset", type=cluster.non_negative_int, metavar="O",
                       help="start at byte offset O (a message boundary) of one partition")
    parser.add_argument("--partition", type=cluster.partition_choice, metavar="P|BROKER-P",
                        help="only this partition: P on every broker, or BROKER-P (not with --group)")
    parser.add_argument("--max-messages", type=cluster.positive_int, metavar="N", help="stop after N messages")
    parser.add_argument("--timeout-ms", type=cluster.non_negative_int, metavar="MS",
                        help="stop when no message came for MS ms (default: wait forever)")
    parser.add_argument("--binary", action="store_true",
                        help="write each payload as a 4-byte big-endian length and the bytes, not as a line")
    parser.add_argument("--fetch-size", type=cluster.positive_int, default=DEFAULT_FETCH_BYTES, metavar="BYTES",
                        help=f"bytes per partition per fetch; must exceed the largest message "
                             f"(default {DEFAULT_FETCH_BYTES})")
    parser.add_argument("--backoff-ms", type=cluster.non_negative_int, default=DEFAULT_BACKOFF_MS, metavar="MS",
                        help=f"wait after a fetch that brought nothing (default {DEFAULT_BACKOFF_MS})")


def write_payloads(out: BinaryIO, payloads: Iterable[bytes | memoryview], binary: bool) -> None:
    """Write payloads as lines, or length-prefixed with ``binary``; one write call for all."""
    if binary:
        parts = []
        for payload in payloads:
            parts.append(INT32.pack(len(payload)))
            parts.append(payload)
        out.write(b"".join(parts))
    else:
        payloads = list(payloads)
        if payloads:
            out.write(b"\n".join(payloads) + b"\n")


def run(args: argparse.Namespace) -> int:
    if args.group is not None:
        if args.zk is None:
            raise UsageError("--group needs ZooKeeper, not --broker-list: consumer groups live there")
        if args.partition is not None:
            raise UsageError("--partition cannot be used with --group: the group assigns partitions")
        return _consume_as_group(args)
    return _consume_directly(args)


def _progress() -> Progress:
    # Only when the messages go elsewhere: on a shared terminal the line would cut into them.
    return Progress("consume", enabled=sys.stderr.isatty() and not sys.stdout.isatty())


# -- without a group ----------------------------------------------------------------------------

def _consume_directly(args: argparse.Namespace) -> int:
    replicated = _replicated_consumer(args)
    if replicated is not None:
        with replicated:
            return _consume_replicated(args, replicated)
    with cluster.Consumers() as consumers:
        targets = cluster.topic_partitions(args, args.topic, consumers, args.partition)
        by_broker: dict[tuple[str, int], list[cluster.BrokerPartition]] = {}
        for target in targets:
            by_broker.setdefault((target.host, target.port), []).append(target)

        def fetch_round(positions):
            for (host, port), broker_targets in by_broker.items():
                requests = [FetchRequest(args.topic, target.partition, positions[target], args.fetch_size)
                            for target in broker_targets]
                yield from zip(broker_targets, consumers.get(host, port).multifetch(requests))

        def offsets(target, time_):
            return consumers.of(target).get_offsets_before(args.topic, target.partition, time_, 1)

        return _read_loop(args, targets, fetch_round, offsets, "BROKER-P")


def _read_loop(args: argparse.Namespace, targets: list, fetch_round, offsets, partition_form: str) -> int:
    """Print what ``fetch_round(positions)`` brings, round after round, until --max-messages
    or --timeout-ms. ``targets`` have ``name`` and ``partition``; ``fetch_round`` yields
    ``(target, fetched set)``; ``offsets(target, time)`` is get_offsets_before's answer."""
    out = sys.stdout.buffer
    remaining = args.max_messages
    if args.offset is not None and len(targets) != 1:
        raise UsageError(f"--offset needs one partition, and topic {args.topic} has "
                         f"{len(targets)}: give --partition {partition_form}")
    positions = {target: _start_offset(args, offsets, target) for target in targets}
    with _progress() as progress:
        last_message = time.monotonic()
        while remaining is None or remaining > 0:
            count = 0
            for target, fetched in fetch_round(positions):
                limit = None if remaining is None else remaining - count
                payloads, positions[target] = _payloads(fetched, target, limit, offsets)
                write_payloads(out, payloads, args.binary)
                count += len(payloads)
            out.flush()
            progress.add(count)
            if remaining is not None:
                remaining -= count
            if count:
                last_message = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= args.timeout_ms:
                break
            else:
                time.sleep(args.backoff_ms / 1000)
    return 0


def _start_offset(args: argparse.Namespace, offsets, target) -> int:
    if args.offset is not None:
        return args.offset
    found = offsets(target, EARLIEST_TIME if args.from_beginning else LATEST_TIME)
    return found[0] if found else 0


def _payloads(fetched: FetchedMessageSet, target, limit: int | None, offsets) -> tuple[list[memoryview], int]:
    """The payloads of one fetched set (at most ``limit``) and the offset to fetch next.

    Raises CommandError for an offset out of range, or a message that is malformed, fails its
    CRC or does not fit the fetch size (most often: an --offset that is not a message boundary).
    """
    if limit == 0:
        return [], fetched.offset
    where = f"{fetched.topic} {target.name}"
    hint = "(is the start offset a message boundary?)"
    payloads, next_offset = [], fetched.offset
    try:
        for offset, after, message in fetched:
            if not message.is_valid():
                raise CommandError(f"{where}: the message at offset {offset} fails its CRC {hint}")
            payloads.append(message.payload)
            next_offset = after
            if limit is not None and len(payloads) == limit:
                return payloads, next_offset
    except OffsetOutOfRange:
        earliest, latest = offsets(target, EARLIEST_TIME), offsets(target, LATEST_TIME)
        raise CommandError(f"offset {fetched.offset} is out of range for {where}: "
                           f"its messages are at offsets {earliest[0]} to {latest[0]}") from None
    except InvalidMessage as exc:  # positions count from the start of the fetched set
        raise CommandError(f"{where}: invalid message at offset {fetched.offset + exc.position}: "
                           f"{exc.reason} {hint}") from None
    except InvalidFetchSize as exc:
        raise CommandError(f"{exc} {hint}") from None
    return payloads, fetched.next_offset


# -- replicated topics ----------------------------------------------------------------------


@dataclass(frozen=True)
class _ReplicatedPartition:
    partition: int

    @property
    def name(self) -> str:
        return str(self.partition)  # Kafka 0.8's name: no broker in it


def _replicated_consumer(args: argparse.Namespace) -> ReplicatedConsumer | None:
    """A ReplicatedConsumer if the topic is replicated; None for a 0.7 topic. With --zk, a
    topic registered under /brokers/topics is 0.7 without asking a broker; asking creates an
    unknown topic where default.replication.factor is above 1, as a producer's first send."""
    if args.zk:
        with cluster.cluster_view(args.zk) as view:
            if view.topic_brokers(args.topic):
                return None
            brokers = [(broker_id, (info.host, info.port)) for broker_id, info in view.brokers().items()]
    else:
        brokers = list(args.broker_list.items())
    if not brokers:
        return None  # 0.7's path says there is no broker
    consumer = ReplicatedConsumer(lambda: brokers, socket_timeout_ms=cluster.SOCKET_TIMEOUT_MS)
    try:
        if consumer.topic(args.topic) is not None:
            return consumer
    except BaseException:
        consumer.close()
        raise
    consumer.close()
    return None


def _consume_replicated(args: argparse.Namespace, consumer: ReplicatedConsumer) -> int:
    """Read a replicated topic's partitions from their leaders, following leader changes."""
    topic = consumer.topic(args.topic)
    choice = args.partition
    if choice is not None and choice.broker_id is not None:
        raise UsageError(f"topic {args.topic} is replicated: its partitions are numbered 0..N-1, "
                         f"give --partition P")
    targets = [_ReplicatedPartition(p) for p in range(topic.partition_count)
               if choice is None or choice.partition == p]
    if not targets:
        raise CommandError(f"topic {args.topic} has no partition {choice.partition} "
                           f"(it has {topic.partition_count})")

    def fetch_round(positions):
        requests = [FetchRequest(args.topic, target.partition, positions[target], args.fetch_size)
                    for target in targets]
        return zip(targets, consumer.multifetch(requests))

    def offsets(target, time_):
        return consumer.get_offsets_before(args.topic, target.partition, time_, 1)

    return _read_loop(args, targets, fetch_round, offsets, "P")


# -- as a group member -------------------------------------------------------------------------

def _consume_as_group(args: argparse.Namespace) -> int:
    from twisted_broker.client.zookeeper_consumer import ConsumerRebalanceFailed, ZookeeperConsumerConnector
    from twisted_broker.registry.cluster_view import ZooKeeperUnavailable
    from twisted_broker.registry.consumer_registry import RegistryError

    # The stream gives up waiting every GROUP_POLL_MS, so output is flushed, --timeout-ms
    # checked and SIGTERM seen while no message comes.
    config = ConsumerConfig(zk_connect=args.zk, groupid=args.group, fetch_size=args.fetch_size,
                            fetcher_backoff_ms=args.backoff_ms, autooffset_reset="smallest",
                            consumer_timeout_ms=GROUP_POLL_MS)
    with _StopOnSigterm() as stop:
        try:
            connector = ZookeeperConsumerConnector(config)
        except RegistryError as exc:  # it only connects: cli.main says where it looked
            raise ZooKeeperUnavailable(f"cannot join group {args.group}: {exc}") from None
        try:
            (stream,) = connector.create_message_streams({args.topic: 1})[args.topic]
            _print_stream(stream, args, stop)
        except (RegistryError, ConsumerRebalanceFailed, KafkaError) as exc:
            raise CommandError(f"consuming {args.topic} as group {args.group}: {exc}") from None
        finally:
            connector.shutdown()  # commits what was consumed, which is what was printed
    return 0


def _print_stream(stream, args: argparse.Namespace, stop: "_StopOnSigterm") -> None:
    """Print a group stream's messages until --max-messages, --timeout-ms or SIGTERM."""
    from twisted_broker.client.zookeeper_consumer import ConsumerTimeout

    out = sys.stdout.buffer
    remaining = args.max_messages
    with _progress() as progress:
        last_message = last_flush = time.monotonic()
        while (remaining is None or remaining > 0) and not stop.requested:
            try:
                message = next(stream)
            except ConsumerTimeout:
                out.flush()
                progress.tick()
                idle_ms = (time.monotonic() - last_message) * 1000
                if args.timeout_ms is not None and idle_ms >= args.timeout_ms:
                    break
                continue
            except StopIteration:
                break
            write_payloads(out, (message.payload,), args.binary)
            progress.add()
            if remaining is not None:
                remaining -= 1
            last_message = time.monotonic()
            if last_message - last_flush >= GROUP_POLL_MS / 1000:
                out.flush()
                last_flush = last_message
        out.flush()


class _StopOnSigterm:
    """While active, SIGTERM asks the group loop to stop as the end of its input does: the
    offsets of what was printed are committed at shutdown and the status is 0 (Python's
    default would end the process there, committing nothing, and the next run would print
    the same messages again). The loop sees the request within GROUP_POLL_MS."""

    def __enter__(self) -> "_StopOnSigterm":
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._request)
        return self

    def _request(self, signum: int, frame: object) -> None:
        self.requested = True

    def __exit__(self, *exc_info: object) -> None:
        signal.signal(signal.SIGTERM, self._previous)
