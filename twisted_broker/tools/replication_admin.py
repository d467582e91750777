"""``preferred-leader-election`` and ``reassign-partitions``: admin requests to the controller.

Both write one node under ``/replication/admin`` (docs/replication.md §2) that the controller
carries out and deletes when done (replication/controller.py). As Kafka's tools do, a command
refuses to write while a request of its kind is pending, and checks what it can before
writing (the topic is replicated, the partitions exist, every target broker is registered),
so a refused command changes nothing in ZooKeeper. By default it then waits for the
controller, with a status line on a terminal and ``--timeout``; ``--no-wait`` returns once
the request is written. A request that times out stays pending: the controller finishes it
whenever it can (a reassignment's copy may take long), and ``topics --describe`` shows where
it is.

The waiting helpers are shared with ``topics --create``, which waits for the first leaders.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from typing import TextIO

from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.assignment import AssignmentError, check_reassignment
from twisted_broker.registry.replication_paths import PartitionMove, TopicAssignment
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError, UsageError
from twisted_broker.tools.table import format_table

ELECTION_HELP = "move leadership back to each partition's first (preferred) replica"
REASSIGN_HELP = "change partitions' replicas; the controller copies the data before dropping a replica"
DEFAULT_TIMEOUT_S = 60.0
STATUS_POLL_S = 0.2
_ERASE = "\r\x1b[K"  # back to column 0, erase to the end of the line (as tools/progress.py)


# -- shared by the commands that wait for the controller -----------------------------------

def replication_view(zk: str):
    """A registry.replication_view.ReplicationView on ``zk`` (kazoo loads only when used)."""
    from twisted_broker.registry.replication_view import ReplicationView
    return ReplicationView(zk, timeout_s=cluster.ZK_TIMEOUT_S)


def add_wait_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--no-wait", action="store_true", help=f"return at once, without waiting for {what}")
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to wait for {what} (default {DEFAULT_TIMEOUT_S:g})")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} is not more than 0 seconds")
    return value


def wait_until(status: Callable[[], str | None], *, timeout_s: float, label: str, failure: str,
               stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
    """Call ``status`` every STATUS_POLL_S until it returns None (done). Otherwise it returns what
    is still to happen, shown as ``label: <status> (N s)`` while attached to a terminal.

    Raises CommandError(``failure``, with the last status) after ``timeout_s``.
    """
    stream = stream if stream is not None else sys.stderr
    on_terminal = bool(getattr(stream, "isatty", None) and stream.isatty())
    started = clock()
    drawn = False
    try:
        while True:
            text = status()
            if text is None:
                return
            waited_s = clock() - started
            if waited_s >= timeout_s:
                raise CommandError(f"{failure} after {timeout_s:g} s ({text})")
            if on_terminal:
                stream.write(f"{_ERASE}{label}: {text} ({waited_s:.0f} s)")
                stream.flush()
                drawn = True
            time.sleep(STATUS_POLL_S)
    finally:
        if drawn:
            stream.write(_ERASE)
            stream.flush()


def replicated_assignment(view, topic: str) -> TopicAssignment:
    """The assignment of a replicated topic. Raises CommandError for a 0.7 or unknown topic."""
    try:
        assignment = view.assignment(topic)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if assignment is not None:
        return assignment
    if view.is_07_topic(topic):
        raise CommandError(f"{topic} is a Kafka 0.7 topic: it has no replicas (partitions are per broker)")
    raise CommandError(f"topic {topic} does not exist in ZooKeeper at {view.zk_connect}")


def _check_partitions(topic: str, assignment: TopicAssignment, partitions: Iterable[int]) -> None:
    missing = sorted(p for p in set(partitions) if p not in assignment.replicas)
    if missing:
        raise CommandError(f"topic {topic} has no partition {', '.join(map(str, missing))} "
                           f"(it has 0..{assignment.partition_count - 1})")


def _write_request(view, path: str, value: bytes, what: str) -> None:
    if not view.create_admin_request(path, value):
        raise CommandError(f"a {what} is already pending ({path}): wait for the controller to finish it")


def _ids(replicas: Iterable[int]) -> str:
    return ",".join(map(str, replicas))


# -- preferred-leader-election ---------------------------------------------------------------

def add_election_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    cluster.add_topic_argument(parser, required=False, help="only this topic's partitions (default: every "
                                                           "replicated topic)")
    parser.add_argument("--partition", type=cluster.non_negative_int, action="append", metavar="P",
                        help="only partition P of --topic (repeatable)")
    add_wait_arguments(parser, "the controller")


def run_election(args: argparse.Namespace) -> int:
    if args.partition and not args.topic:
        raise UsageError("--partition needs --topic")
    with replication_view(args.zk) as view:
        if args.topic:
            assignment = replicated_assignment(view, args.topic)
            _check_partitions(args.topic, assignment, args.partition or ())
            wanted = [(args.topic, p) for p in sorted(set(args.partition or assignment.replicas))]
        else:
            wanted = [(topic, p) for topic in view.replicated_topics()
                      for p in replicated_assignment(view, topic).replicas]
            if not wanted:
                raise CommandError(f"there is no replicated topic in ZooKeeper at {view.zk_connect}")
        # Every partition by name, even for "all": a topic created meanwhile is not included.
        request = paths.encode_partition_list([PartitionMove(t, p) for t, p in wanted], with_replicas=False)
        _write_request(view, paths.PREFERRED_REPLICA_ELECTION, request, "preferred leader election")
        if args.no_wait:
            print(f"preferred leader election of {len(wanted)} partition(s) requested")
            return 0
        wait_until(lambda: None if view.admin_request(paths.PREFERRED_REPLICA_ELECTION) is None
                   else f"{len(wanted)} partition(s)",
                   timeout_s=args.timeout, label="preferred-leader-election",
                   failure="the controller has not carried out the preferred leader election "
                           f"(still pending at {paths.PREFERRED_REPLICA_ELECTION})")
        rows = []
        for topic, partition in wanted:
            state = view.partition_state(topic, partition)
            preferred = replicated_assignment(view, topic).replicas[partition][0]
            leader = state.leader if state is not None and state.online else None
            rows.append((topic, partition, "none" if leader is None else leader, preferred,
                         "yes" if leader == preferred else "no"))
    # A partition whose preferred replica is down or out of the ISR keeps its leader (Kafka
    # does the same); the table shows which.
    print("\n".join(format_table(("TOPIC", "PARTITION", "LEADER", "PREFERRED", "ON-PREFERRED"), rows)))
    return 0


# -- reassign-partitions ---------------------------------------------------------------------

def add_reassign_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    cluster.add_topic_argument(parser, required=False, help="the topic of the partition to move")
    parser.add_argument("--partition", type=cluster.non_negative_int, metavar="P", help="the partition to move")
    parser.add_argument("--replicas", type=_broker_ids, metavar="ID[,ID...]",
                        help="its new replicas, the preferred leader first")
    parser.add_argument("--reassignment-json-file", type=argparse.FileType("rb"), metavar="FILE",
                        help='many moves at once, as Kafka writes them: {"version": 1, "partitions": '
                             '[{"topic": "t", "partition": 0, "replicas": [1, 2]}]}')
    add_wait_arguments(parser, "the controller (copying the data may take long)")


def _broker_ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of broker ids") from None
    if any(b < 0 for b in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: broker ids are not negative")
    return ids


def _requested_moves(args: argparse.Namespace) -> list[PartitionMove]:
    one = (args.topic, args.partition, args.replicas)
    if args.reassignment_json_file is not None:
        if any(value is not None for value in one):
            raise UsageError("--reassignment-json-file replaces --topic, --partition and --replicas")
        with args.reassignment_json_file as file:
            try:
                moves = paths.decode_partition_list(file.read(), with_replicas=True)
            except ValueError as exc:
                raise UsageError(f"{file.name}: {exc}") from None
        if not moves:
            raise UsageError(f"{file.name} names no partition")
    elif any(value is None for value in one):
        raise UsageError("give --topic, --partition and --replicas, or --reassignment-json-file")
    else:
        moves = [PartitionMove(*one)]
    seen = set()
    for move in moves:
        if (move.topic, move.partition) in seen:
            raise UsageError(f"partition {move.topic}-{move.partition} is named twice")
        seen.add((move.topic, move.partition))
    return moves


def run_reassign(args: argparse.Namespace) -> int:
    moves = _requested_moves(args)
    with replication_view(args.zk) as view:
        live = view.brokers()
        for move in moves:
            _check_partitions(move.topic, replicated_assignment(view, move.topic), [move.partition])
            try:
                check_reassignment(move.replicas, live)
            except AssignmentError as exc:
                raise CommandError(f"{move.topic}-{move.partition}: {exc} (live: {_ids(live) or 'none'})") from None
        request = paths.encode_partition_list(moves, with_replicas=True)
        _write_request(view, paths.REASSIGN_PARTITIONS, request, "partition reassignment")
        if args.no_wait:
            print(f"reassignment of {len(moves)} partition(s) requested; topics --describe shows the replicas")
            return 0
        wait_until(lambda: _reassignment_status(view, moves), timeout_s=args.timeout, label="reassign-partitions",
                   failure=f"the reassignment is not finished (still pending at {paths.REASSIGN_PARTITIONS}; "
                           "the controller goes on with it)")
        rows, refused = [], []
        for move in moves:
            replicas = replicated_assignment(view, move.topic).replicas[move.partition]
            rows.append((move.topic, move.partition, _ids(replicas)))
            if replicas != move.replicas:
                refused.append(f"{move.topic}-{move.partition}")
    if refused:  # the controller checks again and refuses (and logs why) what changed meanwhile
        raise CommandError(f"the controller refused the reassignment of {', '.join(refused)}; "
                           "its broker's log says why")
    print("\n".join(format_table(("TOPIC", "PARTITION", "REPLICAS"), rows)))
    return 0


def _reassignment_status(view, moves: list[PartitionMove]) -> str | None:
    value = view.admin_request(paths.REASSIGN_PARTITIONS)
    if value is None:
        return None
    try:
        pending = paths.decode_partition_list(value, with_replicas=True)
    except ValueError:
        return f"{len(moves)} partition(s) moving"
    return f"{len(pending)} of {len(moves)} partition(s) still copying"

