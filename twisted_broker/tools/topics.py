"""``topics``: list, describe and create topics, both kinds (docs/replication.md §1).

Kafka 0.7 topics: one line per topic and broker (spec 5.2: ``/brokers/topics/<topic>/<broker
id>`` holds the partition count), with the broker's address from ``/brokers/ids``; a broker
that registered a topic but is no longer registered itself shows ``-`` as its address (its
topic nodes are ephemeral too, so this only lasts until its session times out).

Replicated topics (``/replication/topics/<t>``): listed in a second table with their
partition count and replication factor; ``--describe`` shows each partition's leader,
replicas and ISR, and ``--describe --json`` prints exactly one JSON object for one topic:
``{"topic": T, "partitions": [{"partition": 0, "leader": 1, "replicas": [...], "isr": [...]}]}``
with ``leader`` null while the partition has none (offline, or not elected yet). Listing or
describing every topic reads the assignments, then every partition's state, in bulk
(``assignments_of``, ``partition_states``): two waits for ZooKeeper, not one per partition. A 0.7 topic
has no such partitions (its partitions are per broker), so ``--json`` refuses it with a usage
error (exit 2) rather than print an object whose fields would mean something else.

``--create`` makes a replicated topic as Kafka's tool does: the assignment from
replication/admin.plan_topic over the live brokers, written once (an existing topic of
either kind is refused); it then waits until the controller elected every partition's
first leader, unless ``--no-wait``.
"""

from __future__ import annotations

import argparse
import json

from twisted_broker.errors import InvalidTopic
from twisted_broker.replication.admin import plan_topic
from twisted_broker.replication.assignment import AssignmentError
from twisted_broker.tools import cluster, replication_admin
from twisted_broker.tools.errors import CommandError, UsageError
from twisted_broker.tools.table import format_table

HELP = "list, describe (leader, replicas, ISR) or create topics"
TOPICS_HEADER = ("TOPIC", "BROKER", "ADDRESS", "PARTITIONS")
REPLICATED_HEADER = ("TOPIC", "PARTITIONS", "REPLICATION-FACTOR")
DESCRIBE_HEADER = ("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    cluster.add_topic_argument(parser, required=False, help="only this topic")
    parser.add_argument("--describe", action="store_true",
                        help="each replicated partition's leader, replicas and ISR")
    parser.add_argument("--json", action="store_true",
                        help="with --describe --topic: one JSON object on stdout")
    parser.add_argument("--create", action="store_true", help="create --topic as a replicated topic")
    parser.add_argument("--partitions", type=cluster.positive_int, metavar="N", help="with --create")
    parser.add_argument("--replication-factor", type=cluster.positive_int, metavar="R",
                        help="with --create: copies of each partition, at most the live brokers")
    replication_admin.add_wait_arguments(parser, "the first leaders (--create)")


def topic_rows(view, topics: list[str]) -> list[tuple[str, int, str, int]]:
    """``(topic, broker id, host:port or "-", partitions)`` for each topic and broker holding it."""
    brokers = view.brokers()
    holders = view.topics_brokers(topics)
    rows = []
    for topic in topics:
        for broker_id, count in holders[topic].items():
            broker = brokers.get(broker_id)
            rows.append((topic, broker_id, f"{broker.host}:{broker.port}" if broker else "-", count))
    return rows


def replicated_rows(view, topics: list[str]) -> list[tuple[str, int, str]]:
    """``(topic, partitions, replication factor)``; the factor reads ``2-3`` while a
    reassignment has widened some partitions' replica lists."""
    rows = []
    for topic, assignment in _assignments(view, topics).items():
        sizes = sorted({len(replicas) for replicas in assignment.replicas.values()})
        factor = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        rows.append((topic, assignment.partition_count, factor))
    return rows


def describe_partitions(view, topic: str) -> list[dict]:
    """``[{"partition", "leader" (None: none), "replicas", "isr"}]`` of a replicated topic,
    partitions 0..N-1. A partition the controller has not elected yet has no leader and an
    empty ISR."""
    return describe_topics(view, [topic])[topic]


def describe_topics(view, topics: list[str]) -> dict[str, list[dict]]:
    """``describe_partitions`` of each of ``topics``: the assignments, then every partition's
    state, each read in bulk (two waits for ZooKeeper, not one per partition)."""
    assignments = _assignments(view, topics)
    keys = [(topic, partition) for topic, assignment in assignments.items() for partition in sorted(assignment.replicas)]
    try:
        states = view.partition_states(keys)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    described: dict[str, list[dict]] = {topic: [] for topic in topics}
    for topic, partition in keys:
        state, replicas = states[topic, partition], assignments[topic].replicas[partition]
        described[topic].append({"partition": partition, "leader": state.leader if state and state.online else None,
                                 "replicas": list(replicas), "isr": list(state.isr) if state else []})
    return described


def _assignments(view, topics: list[str]) -> dict:
    """Each topic's assignment, read in bulk; CommandError as replicated_assignment says it
    (a 0.7 or unknown topic, an assignment that does not decode)."""
    try:
        found = view.assignments_of(topics)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    for topic, assignment in found.items():
        if assignment is None:
            replication_admin.replicated_assignment(view, topic)  # raises the reason
    return found


def describe_rows(topic: str, partitions: list[dict]) -> list[tuple[str, int, str, str, str]]:
    def ids(values: list[int]) -> str:
        return ",".join(map(str, values)) or "-"

    return [(topic, p["partition"], "none" if p["leader"] is None else str(p["leader"]), ids(p["replicas"]),
             ids(p["isr"])) for p in partitions]


def _check_arguments(args: argparse.Namespace) -> None:
    if args.json and not (args.describe and args.topic):
        raise UsageError("--json needs --describe and --topic")
    if args.create:
        if args.describe:
            raise UsageError("--create and --describe do not go together")
        if not (args.topic and args.partitions and args.replication_factor):
            raise UsageError("--create needs --topic, --partitions and --replication-factor")
    elif args.partitions or args.replication_factor:
        raise UsageError("--partitions and --replication-factor go with --create")


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    with replication_admin.replication_view(args.zk) as view:
        if args.create:
            return _create(view, args)
        if args.describe and args.json:
            print(json.dumps(_describe_json(view, args.topic)))
            return 0
        if args.topic:
            replicated = [args.topic] if view.assignment(args.topic) is not None else []
            topics_07 = [args.topic] if view.is_07_topic(args.topic) else []
        else:
            replicated, topics_07 = view.replicated_topics(), view.topics()
        if args.topic and not (replicated or topics_07):
            raise CommandError(f"topic {args.topic} is not registered in ZooKeeper at {args.zk}")
        if args.describe:
            described = describe_topics(view, replicated)
            rows = [row for topic in replicated for row in describe_rows(topic, described[topic])]
            first = format_table(DESCRIBE_HEADER, rows) if rows else []
        else:
            first = format_table(REPLICATED_HEADER, replicated_rows(view, replicated)) if replicated else []
        rows_07 = topic_rows(view, topics_07)
    tables = [table for table in (format_table(TOPICS_HEADER, rows_07) if rows_07 else [], first) if table]
    if tables:  # a blank line between the two kinds of topic
        print("\n\n".join("\n".join(table) for table in tables))
    return 0


def _describe_json(view, topic: str) -> dict:
    if view.assignment(topic) is None and view.is_07_topic(topic):
        raise UsageError(f"{topic} is a Kafka 0.7 topic: partitions are per broker "
                         "(see topics --describe without --json)")
    return {"topic": topic, "partitions": describe_partitions(view, topic)}


def _create(view, args: argparse.Namespace) -> int:
    topic = args.topic
    if view.is_07_topic(topic):
        raise CommandError(f"{topic} is a Kafka 0.7 topic already (registered under /brokers/topics)")
    if view.assignment(topic) is not None:
        raise CommandError(f"topic {topic} exists already")
    try:
        assignment = plan_topic(topic, partitions=args.partitions, replication_factor=args.replication_factor,
                                live_brokers=list(view.brokers()))
    except (AssignmentError, InvalidTopic) as exc:
        raise CommandError(f"cannot create {topic}: {exc}") from None
    if not view.create_topic(topic, assignment):
        raise CommandError(f"topic {topic} exists already")
    print(f"created topic {topic}: {assignment.partition_count} partition(s), replication factor "
          f"{args.replication_factor}")
    if not args.no_wait:
        def unelected() -> str | None:
            missing = [p for p in assignment.replicas if view.partition_state(topic, p) is None]
            return f"{len(missing)} partition(s) without a leader" if missing else None

        replication_admin.wait_until(unelected, timeout_s=args.timeout, label="topics --create",
                                     failure=f"topic {topic} is created, but the controller has not "
                                             "elected its first leaders")
    return 0
