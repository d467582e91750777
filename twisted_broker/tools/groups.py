"""``groups`` and ``reset-offsets``: consumer groups' positions, read and rewritten in ZooKeeper.

``groups`` is 0.7's ConsumerOffsetChecker: for each partition of each topic a group has
offsets or owners for, the committed offset (``/consumers/<g>/offsets/<t>/<b>-<p>``, or
``<p>`` for a replicated topic), the latest offset (an Offsets(-1) request to the partition's
broker, or its leader: the flushed end, spec 4.4), the lag between them in bytes (offsets are
byte positions, so lag counts bytes, not messages), and the owning consumer thread. What
cannot be known shows ``-``: no committed offset yet, a broker that is down.

A group of Kafka clients (consumers with a group id on the modern listener) commits at the
same paths, but modern offsets, and registers no ``ids`` node: that tells the two kinds
apart (where brokers have modern listeners at all). Its LOGSIZE is the partition's modern
end (ListOffsets latest from the leader's modern listener, client/modern_lookup.py), its LAG
``modern end - committed``, as Kafka's clients count it (offsets, which here are nearly byte
positions: docs/kafka-protocol.md §2), and its OWNER the member the coordinator assigned the
partition to (none unless the group is Stable). ``reset-offsets`` refuses such a group: it
writes 0.7's offsets.

``reset-offsets`` writes a group's offsets of one topic to the earliest or latest offset, or
the start of the newest segment written before a time (0.7's offset import tools). It refuses
while the group has live consumers: they hold their positions in memory and would write them
back at their next commit. The check and the writes are separate ZooKeeper calls, so a
consumer that joins in between is not stopped; that is the operator's to avoid. Every offset
is read from the brokers before the first one is written, so a broker that is down changes
nothing.
"""

from __future__ import annotations

import argparse

from twisted_broker.client.modern_lookup import ModernLookup
from twisted_broker.client.replicated_topics import registered_replicated_topic
from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME
from twisted_broker.registry import paths
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.offsets import offset_time
from twisted_broker.tools.table import format_table

HELP = "show consumer groups: per partition owner, committed offset, latest offset, lag (ConsumerOffsetChecker)"
RESET_HELP = "set a stopped consumer group's offsets of a topic to earliest, latest or a time"
OFFSET_CHECKER_HEADER = ("GROUP", "TOPIC", "PID", "OFFSET", "LOGSIZE", "LAG", "OWNER")  # ConsumerOffsetChecker's columns
UNKNOWN = "-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    parser.add_argument("--group", metavar="G", help="only this group (default: every group)")
    cluster.add_topic_argument(parser, required=False, help="only this topic")


def add_reset_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    parser.add_argument("--group", metavar="G", required=True, help="the consumer group (its consumers stopped)")
    cluster.add_topic_argument(parser)
    parser.add_argument("--to", type=offset_time, required=True, metavar="earliest|latest|MS",
                        help="earliest, latest, or ms since the epoch (the start of the newest segment "
                             "written before it; earliest if none was)")


def _partition_key(name: str) -> tuple:
    """``b-p`` as ``(b, p)``, a replicated topic's ``p`` as ``(p,)``: numeric order."""
    try:
        return tuple(int(part) for part in name.split("-", 1))
    except ValueError:
        return float("inf"), name  # a stray node: listed last, as found


def group_rows(view, consumers: cluster.Consumers, lookup: ModernLookup, group: str, topic: str) -> list[tuple]:
    """One row of OFFSET_CHECKER_HEADER per partition of ``topic`` that is registered, committed or owned."""
    replicated = registered_replicated_topic(view, topic)
    if replicated is not None:
        modern = {str(partition): partition for partition in range(replicated.partition_count)}
    else:
        modern = {paths.partition_name(broker_id, partition): number
                  for number, (broker_id, partition) in enumerate(view.partitions(topic))}
    committed = view.offsets(group, topic)
    owners = view.owners(group, topic)
    names = sorted(set(modern) | set(committed) | set(owners), key=_partition_key)
    # Without modern listeners there are no Kafka clients' groups: offsets written by hand or
    # by reset-offsets are a 0.7 group's.
    if view.has_consumer_registry(group) or not lookup.has_listeners:
        latest = {name: _latest_offset(consumers, view.brokers(), replicated, topic, name) for name in names}
    else:
        ends = lookup.latest((topic, number) for number in modern.values())
        latest = {name: ends.get((topic, modern.get(name))) for name in names}
        members = lookup.members(group)
        assigned = members.owners(topic) if members is not None else {}
        owners = {name: assigned[modern[name]] for name in names if modern.get(name) in assigned}
    rows = []
    for name in names:
        offset = committed.get(name)
        lag = latest[name] - offset if latest[name] is not None and offset is not None else None
        rows.append((group, topic, name, _or_unknown(offset), _or_unknown(latest[name]), _or_unknown(lag),
                     owners.get(name, "none")))
    return rows


def _or_unknown(value: int | None) -> object:
    return UNKNOWN if value is None else value


def _latest_offset(consumers: cluster.Consumers, brokers: dict, replicated, topic: str, name: str) -> int | None:
    """0.7's latest offset of a partition named ``b-p``, or ``p`` of a replicated topic (from
    its leader's 0.7 port)."""
    key = _partition_key(name)
    if replicated is not None:
        leader = replicated.leader(key[0]) if len(key) == 1 and key[0] < replicated.partition_count else None
        address = leader[1] if leader is not None else None
    else:
        broker = brokers.get(key[0]) if len(key) == 2 else None
        address = (broker.host, broker.port) if broker is not None else None
    if address is None:
        return None
    try:
        offsets = consumers.get(*address).get_offsets_before(topic, key[-1], LATEST_TIME, 1)
    except (ConnectionError, TimeoutError):
        return None  # down, or a partition it no longer has: shown as unknown
    return offsets[0] if offsets else None


def run(args: argparse.Namespace) -> int:
    from twisted_broker.registry.replication_view import ReplicationView

    with ReplicationView(args.zk, timeout_s=cluster.ZK_TIMEOUT_S) as view, cluster.Consumers() as consumers:
        known = view.groups()
        if args.group is not None and args.group not in known:
            raise CommandError(f"no consumer group {args.group} in ZooKeeper at {args.zk}")
        rows = []
        with ModernLookup(list(view.modern_listeners().values())) as lookup:
            for group in [args.group] if args.group is not None else known:
                for topic in [args.topic] if args.topic else view.group_topics(group):
                    rows += group_rows(view, consumers, lookup, group, topic)
    if rows:
        print("\n".join(format_table(OFFSET_CHECKER_HEADER, rows)))
    return 0


def run_reset(args: argparse.Namespace) -> int:
    with cluster.cluster_view(args.zk) as view, cluster.Consumers() as consumers:
        if (args.group in view.groups() and not view.has_consumer_registry(args.group)
                and view.modern_listeners()):
            raise CommandError(f"group {args.group} is a group of Kafka clients, whose offsets are modern "
                               "offsets: reset them with a Kafka client through the modern listener")
        live = view.consumer_ids(args.group)
        owners = view.owners(args.group, args.topic)
        if live or owners:
            who = ", ".join(live or sorted(set(owners.values())))
            raise CommandError(f"group {args.group} has live consumers ({who}); stop them first, "
                               "or they will overwrite the offsets at their next commit")
        counts = view.topic_brokers(args.topic)
        down = sorted(set(counts) - set(view.brokers()))
        if down:
            raise CommandError(f"broker(s) {', '.join(map(str, down))} of topic {args.topic} are not "
                               "registered, so their offsets cannot be read; nothing was changed")
        targets = cluster.registered_partitions(view, args.topic)
        new_offsets = {target: _offset_at(consumers.of(target), args.topic, target.partition, args.to)
                       for target in targets}
        old_offsets = view.offsets(args.group, args.topic)
        for target, offset in new_offsets.items():
            view.set_offset(args.group, args.topic, target.name, offset)
            old = _or_unknown(old_offsets.get(target.name))
            print(f"{args.group} {args.topic}:{target.name} {old} -> {offset}")
    return 0


def _offset_at(consumer, topic: str, partition: int, time_ms: int) -> int:
    offsets = consumer.get_offsets_before(topic, partition, time_ms, 1)
    if not offsets:  # every segment was written after time_ms: all of the log is newer
        offsets = consumer.get_offsets_before(topic, partition, EARLIEST_TIME, 1)
    return offsets[0]
