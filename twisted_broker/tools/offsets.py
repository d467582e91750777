"""``offsets``: the earliest, latest or before-time offsets of a topic's partitions (0.7's
GetOffsetShell).

One Offsets request per partition (spec 4.4): ``--time latest`` (-1) answers the flushed end,
``earliest`` (-2) the start of the oldest segment, a time in ms since the epoch the starts of
the segments last written at or before it, newest first, at most ``--max`` of them. Each
partition is one line, ``TOPIC:BROKER-PARTITION:OFFSET,OFFSET...`` (GetOffsetShell's later
format, with 0.7's partition names); a time before every segment gives an empty list.
"""

from __future__ import annotations

import argparse

from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME
from twisted_broker.tools import cluster

HELP = "print the earliest, latest or before-time offsets of a topic's partitions (GetOffsetShell)"
TIMES = {"latest": LATEST_TIME, "earliest": EARLIEST_TIME}


def offset_time(text: str) -> int:
    """``latest``, ``earliest``, or ms since the epoch (0.7's -1 and -2 are accepted too)."""
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not latest, earliest or a time in ms") from None
    if value < EARLIEST_TIME:
        raise argparse.ArgumentTypeError(f"{value} is not latest, earliest or a time in ms")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser)
    cluster.add_topic_argument(parser)
    parser.add_argument("--partition", type=cluster.partition_choice, metavar="P|BROKER-P",
                        help="one partition: P on every broker, or BROKER-P (default: all)")
    parser.add_argument("--time", type=offset_time, default=LATEST_TIME, metavar="latest|earliest|MS",
                        help="latest (default), earliest, or ms since the epoch")
    parser.add_argument("--max", type=cluster.positive_int, default=1, metavar="N",
                        help="at most N offsets per partition (default 1)")


def format_offsets(topic: str, partition_name: str, offsets: list[int]) -> str:
    """One output line: ``topic:broker-partition:o1,o2,...``."""
    return f"{topic}:{partition_name}:{','.join(map(str, offsets))}"


def run(args: argparse.Namespace) -> int:
    with cluster.Consumers() as consumers:
        targets = cluster.topic_partitions(args, args.topic, consumers, args.partition)
        for target in targets:
            try:
                consumer = consumers.of(target)
                offsets = consumer.get_offsets_before(args.topic, target.partition, args.time, args.max)
            except ConnectionError as exc:
                # A 0.7 broker answers a bad Offsets request by closing the connection.
                raise ConnectionError(f"offsets of {args.topic} {target.name} from {target.host}:{target.port}: "
                                      f"{exc}") from None
            print(format_offsets(args.topic, target.name, offsets), flush=True)
    return 0
