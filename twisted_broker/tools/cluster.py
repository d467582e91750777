"""The cluster a subcommand talks to: its arguments, and the brokers and partitions they name.

``--zk HOST:PORT[,...][/chroot]`` reads brokers and topics from the registry (spec 5.2);
``--broker-list ID:HOST:PORT[,...]`` names brokers directly (0.7's ``broker.list``). Given
neither, ``--zk`` is zk_default.py's default (TWISTED_BROKER_ZK, else etc/server.properties). A broker
list says nothing about partitions, so ``topic_partitions`` asks each listed broker: a Fetch
of a partition beyond the topic's count is answered with WrongPartition (spec 2.2), so one
MultiFetch of empty fetches finds the count without reading any data. Partitions are named
as 0.7 names them, ``<broker id>-<partition>``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from twisted_broker.client import cluster as client_cluster
from twisted_broker.client.broker_partition_info import parse_broker_list
from twisted_broker.client.cluster import (  # PROBE_BATCH: kept importable from here
    PROBE_BATCH, PROBE_LIMIT, BrokerPartition, ConsumerPool, PartitionProbeError,
)
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.errors import InvalidTopic
from twisted_broker.storage.topic_name import check_topic_name
from twisted_broker.tools import zk_default
from twisted_broker.tools.errors import CommandError

ZK_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_MS = 10000

_ZK_HOST = r"[^,/:\s]+:\d{1,5}"
_ZK_CONNECT = re.compile(rf"{_ZK_HOST}(,{_ZK_HOST})*(/\S*)?")


# -- argument types: a bad value is a usage error (exit status 2) ------------------------------

def zk_connect(text: str) -> str:
    """A ``zk.connect`` string: ``host:port[,host:port...][/chroot]``."""
    if not _ZK_CONNECT.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT[,HOST:PORT...][/CHROOT]")
    return text


def broker_list(text: str) -> dict[int, tuple[str, int]]:
    """A ``broker.list`` string parsed into ``{id: (host, port)}``."""
    try:
        return parse_broker_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def broker_list_text(brokers: dict[int, tuple[str, int]]) -> str:
    """``broker_list``'s result as ``broker.list`` text again, for a ProducerConfig."""
    return ",".join(f"{broker_id}:{host}:{port}" for broker_id, (host, port) in brokers.items())


def topic(text: str) -> str:
    """A topic name a broker accepts (spec 4.9)."""
    try:
        return check_topic_name(text)
    except InvalidTopic as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class PartitionChoice:
    """``--partition``: ``P`` (partition P on every broker) or ``B-P`` (on broker B only)."""

    partition: int
    broker_id: int | None = None

    def matches(self, broker_id: int, partition: int) -> bool:
        return partition == self.partition and self.broker_id in (None, broker_id)


def partition_choice(text: str) -> PartitionChoice:
    broker, dash, partition = text.rpartition("-")
    try:
        if dash:
            choice = PartitionChoice(int(partition), int(broker))
        else:
            choice = PartitionChoice(int(partition))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not PARTITION or BROKER-PARTITION") from None
    if choice.partition < 0 or (choice.broker_id is not None and choice.broker_id < 0):
        raise argparse.ArgumentTypeError(f"{text!r}: ids are not negative")
    return choice


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


# -- the arguments --------------------------------------------------------------------------

def add_cluster_arguments(parser: argparse.ArgumentParser, *, allow_broker_list: bool = True) -> None:
    """``--zk`` (and, unless ``allow_broker_list`` is False, ``--broker-list``): at most one.

    Without either, ``args.zk`` is zk_default's default; ``args.zk_source`` says where the
    value came from (``--zk``, the environment variable or a file), for the error that
    nobody answers there.
    """
    default = zk_default.default_zk_connect()
    parser.set_defaults(zk_source=default.source)
    zk_options = {"type": _zk_connect_from(default), "default": default.connect, "action": _ZkGiven,
                  "metavar": "HOST:PORT[,...]", "help": zk_default.zk_help(default)}
    if not allow_broker_list:
        parser.add_argument("--zk", **zk_options)
        return
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--zk", **zk_options)
    group.add_argument("--broker-list", type=broker_list, action=_BrokerListGiven, metavar="ID:HOST:PORT[,...]",
                       help="the brokers themselves, without ZooKeeper")


class _ZkGiven(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.zk_source = option_string


class _BrokerListGiven(argparse.Action):
    # The --zk default applies only when neither is given: a broker list leaves args.zk None
    # (argparse then no longer sees the default there, so it does not convert it either).
    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.zk = namespace.zk_source = None


def _zk_connect_from(default: zk_default.ZkDefault):
    """zk_connect, naming the environment variable or file when the bad value is the default."""
    def check(text: str) -> str:
        try:
            return zk_connect(text)
        except argparse.ArgumentTypeError as exc:
            if text is default.connect:  # argparse passes the default object itself
                raise argparse.ArgumentTypeError(f"{exc} (from {default.source})") from None
            raise
    return check


def add_topic_argument(parser: argparse.ArgumentParser, *, required: bool = True,
                       help: str = "the topic") -> None:
    parser.add_argument("--topic", type=topic, required=required, metavar="TOPIC", help=help)


# -- what they name ------------------------------------------------------------------------

@contextmanager
def cluster_view(zk: str) -> Iterator:
    """A registry.cluster_view.ClusterView on ``zk`` (imported here: kazoo loads only when used)."""
    from twisted_broker.registry.cluster_view import ClusterView
    view = ClusterView(zk, timeout_s=ZK_TIMEOUT_S)
    try:
        yield view
    finally:
        view.close()


def registered_partitions(view, topic_name: str) -> list[BrokerPartition]:
    """The partitions of a topic registered in ZooKeeper, on brokers that are registered too.

    Raises CommandError when no broker holds the topic, or none of those that do is alive.
    """
    found = client_cluster.registered_partitions(view, topic_name)
    if not found:
        counts = view.topic_brokers(topic_name)
        if not counts:
            raise CommandError(f"topic {topic_name} is not registered in ZooKeeper at {view.zk_connect}")
        raise CommandError(f"no live broker holds topic {topic_name} (registered on brokers "
                           f"{', '.join(map(str, counts))}, none of them in {view.zk_connect}/brokers/ids)")
    return found


def probe_partition_count(consumer: SimpleConsumer, topic_name: str, limit: int = PROBE_LIMIT) -> int:
    """The number of partitions a broker allows for ``topic_name`` (it may hold no data yet).

    Raises CommandError if the broker refuses the topic name, ConnectionError if it is down.
    """
    try:
        return client_cluster.probe_partition_count(consumer, topic_name, limit)
    except PartitionProbeError as exc:
        raise CommandError(str(exc)) from None


class Consumers(ConsumerPool):
    """One SimpleConsumer per broker, made on first use; ``close`` closes them all."""

    def __init__(self, socket_timeout_ms: int = SOCKET_TIMEOUT_MS) -> None:
        super().__init__(socket_timeout_ms)


def topic_partitions(args: argparse.Namespace, topic_name: str, consumers: Consumers,
                     choice: PartitionChoice | None = None) -> list[BrokerPartition]:
    """The partitions of ``topic_name`` in the cluster ``args`` names, narrowed by ``choice``.

    Raises CommandError when there are none (unknown topic, no such partition), or the
    errors of the registry and the brokers (ZooKeeperUnavailable, ConnectionError).
    """
    if getattr(args, "zk", None):
        with cluster_view(args.zk) as view:
            found = registered_partitions(view, topic_name)
    else:
        found = []
        for broker_id, (host, port) in args.broker_list.items():
            if choice is not None and choice.broker_id not in (None, broker_id):
                continue
            count = probe_partition_count(consumers.get(host, port), topic_name)
            found += [BrokerPartition(broker_id, partition, host, port) for partition in range(count)]
    if choice is not None:
        found = [target for target in found if choice.matches(target.broker_id, target.partition)]
        if not found:
            where = f"broker {choice.broker_id}" if choice.broker_id is not None else "any broker"
            raise CommandError(f"topic {topic_name} has no partition {choice.partition} on {where}")
    return sorted(found)
