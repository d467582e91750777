"""``topics``: the topics registered in ZooKeeper, and how many partitions each broker holds.

One line per topic and broker (spec 5.2: ``/brokers/topics/<topic>/<broker id>`` holds the
partition count), with the broker's address from ``/brokers/ids``; a broker that registered a
topic but is no longer registered itself shows ``-`` as its address (its topic nodes are
ephemeral too, so this only lasts until its session times out).
"""

from __future__ import annotations

import argparse

from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.table import format_table

HELP = "list the topics registered in ZooKeeper, partitions per broker"
HEADER = ("TOPIC", "BROKER", "ADDRESS", "PARTITIONS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    cluster.add_topic_argument(parser, required=False, help="only this topic")


def topic_rows(view, topics: list[str]) -> list[tuple[str, int, str, int]]:
    """``(topic, broker id, host:port or "-", partitions)`` for each topic and broker holding it."""
    brokers = view.brokers()
    rows = []
    for topic in topics:
        for broker_id, count in view.topic_brokers(topic).items():
            broker = brokers.get(broker_id)
            rows.append((topic, broker_id, f"{broker.host}:{broker.port}" if broker else "-", count))
    return rows


def run(args: argparse.Namespace) -> int:
    with cluster.cluster_view(args.zk) as view:
        topics = [args.topic] if args.topic else view.topics()
        rows = topic_rows(view, topics)
    if args.topic and not rows:
        raise CommandError(f"topic {args.topic} is not registered in ZooKeeper at {args.zk}")
    if rows:
        print("\n".join(format_table(HEADER, rows)))
    return 0
