"""The replication commands against an in-memory view: checks that fail write nothing, a
pending request is never overwritten, describe's JSON shape, and the wait's timeout."""

import io
import json

import pytest

from twisted_broker import cli
from twisted_broker.registry.paths import BrokerInfo
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.tools import replication_admin, topics
from twisted_broker.tools.errors import CommandError, UsageError


class FakeView:
    """ReplicationView's methods over dicts; ``written`` records every create."""

    zk_connect = "zk:2181"

    def __init__(self, *, brokers=(0, 1, 2), assignments=None, states=None, topics_07=(), pending=()):
        self._brokers = {b: BrokerInfo(b, "c", "h", 9092 + 100 * b) for b in brokers}
        self.assignments = {t: TopicAssignment(r) for t, r in (assignments or {}).items()}
        self.states = dict(states or {})
        self.topics_07 = set(topics_07)
        self.nodes = {path: b"{}" for path in pending}
        self.written = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def brokers(self):
        return self._brokers

    def topics(self):
        return sorted(self.topics_07)

    def topic_brokers(self, topic):
        return {0: 1} if topic in self.topics_07 else {}

    def replicated_topics(self):
        return sorted(self.assignments)

    def is_07_topic(self, topic):
        return topic in self.topics_07

    def assignment(self, topic):
        return self.assignments.get(topic)

    def partition_state(self, topic, partition):
        return self.states.get((topic, partition))

    def topics_brokers(self, topics):
        return {topic: self.topic_brokers(topic) for topic in topics}

    def assignments_of(self, topics):
        return {topic: self.assignment(topic) for topic in topics}

    def partition_states(self, keys):
        return {key: self.partition_state(*key) for key in keys}

    def create_topic(self, topic, assignment):
        self.written.append(paths.topic_path(topic))
        self.assignments[topic] = assignment
        return True

    def admin_request(self, path):
        return self.nodes.get(path)

    def create_admin_request(self, path, value):
        if path in self.nodes:
            return False
        self.written.append(path)
        self.nodes[path] = value
        return True


def run(monkeypatch, view, *argv):
    monkeypatch.setattr(replication_admin, "replication_view", lambda zk: view)
    args = cli.build_parser().parse_args(list(argv))
    return cli.SUBCOMMANDS[args.command].run(args)


def test_describe_json_says_null_for_no_leader_and_an_empty_isr_before_the_first_state(monkeypatch, capsys):
    view = FakeView(assignments={"t": {0: (1, 2), 1: (2, 0)}},
                    states={("t", 0): PartitionState(paths.NO_LEADER, 3, (1,), 1)})
    assert run(monkeypatch, view, "topics", "--zk", "zk:1", "--topic", "t", "--describe", "--json") == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"topic": "t", "partitions": [
        {"partition": 0, "leader": None, "replicas": [1, 2], "isr": [1]},
        {"partition": 1, "leader": None, "replicas": [2, 0], "isr": []}]}
    assert out.count("\n") == 1


def test_describe_json_of_a_07_topic_is_a_usage_error(monkeypatch):
    with pytest.raises(UsageError, match="old is a Kafka 0.7 topic: partitions are per broker"):
        run(monkeypatch, FakeView(topics_07={"old"}), "topics", "--zk", "zk:1", "--topic", "old", "--describe",
            "--json")


@pytest.mark.parametrize("argv", [["--json"], ["--describe", "--json"], ["--create", "--topic", "t"],
                                  ["--partitions", "2"], ["--create", "--describe", "--topic", "t", "--partitions",
                                                          "1", "--replication-factor", "1"]])
def test_arguments_that_do_not_fit_together_are_usage_errors(monkeypatch, argv):
    view = FakeView()
    with pytest.raises(UsageError):
        run(monkeypatch, view, "topics", "--zk", "zk:1", *argv)
    assert view.written == []


def test_create_places_replicas_on_live_brokers_only(monkeypatch):
    view = FakeView(brokers=(3, 5))
    assert run(monkeypatch, view, "topics", "--zk", "zk:1", "--create", "--topic", "t", "--partitions", "4",
               "--replication-factor", "2", "--no-wait") == 0
    assert {frozenset(r) for r in view.assignments["t"].replicas.values()} == {frozenset((3, 5))}
    with pytest.raises(CommandError, match="replication factor 3 is larger than the 2 live broker"):
        run(monkeypatch, view, "topics", "--zk", "zk:1", "--create", "--topic", "u", "--partitions", "1",
            "--replication-factor", "3")
    assert view.written == [paths.topic_path("t")]


def test_a_pending_request_is_not_overwritten(monkeypatch):
    view = FakeView(assignments={"t": {0: (0, 1)}}, pending=[paths.REASSIGN_PARTITIONS,
                                                              paths.PREFERRED_REPLICA_ELECTION])
    with pytest.raises(CommandError, match="a partition reassignment is already pending"):
        run(monkeypatch, view, "reassign-partitions", "--zk", "zk:1", "--topic", "t", "--partition", "0",
            "--replicas", "1,2")
    with pytest.raises(CommandError, match="a preferred leader election is already pending"):
        run(monkeypatch, view, "preferred-leader-election", "--zk", "zk:1")
    assert view.written == [] and set(view.nodes.values()) == {b"{}"}


@pytest.mark.parametrize("argv, error", [
    (["--topic", "t", "--partition", "0", "--replicas", "1,1"], "name a broker twice"),
    (["--topic", "t", "--partition", "0", "--replicas", "1,9"], "broker(s) [9] are not registered"),
    (["--topic", "t", "--partition", "2", "--replicas", "1,2"], "topic t has no partition 2"),
    (["--topic", "old", "--partition", "0", "--replicas", "1"], "old is a Kafka 0.7 topic"),
    (["--topic", "nope", "--partition", "0", "--replicas", "1"], "topic nope does not exist"),
    (["--topic", "t", "--partition", "0"], "give --topic, --partition and --replicas"),
])
def test_a_reassignment_that_cannot_be_placed_writes_nothing(monkeypatch, argv, error):
    view = FakeView(assignments={"t": {0: (0, 1)}}, topics_07={"old"})
    with pytest.raises(CommandError) as raised:
        run(monkeypatch, view, "reassign-partitions", "--zk", "zk:1", *argv)
    assert error in str(raised.value)
    assert view.written == []


def test_no_wait_writes_the_request_the_controller_reads(monkeypatch, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 1, "replicas": [2, 0]},
                                                             {"topic": "t", "partition": 0, "replicas": [1]}]}))
    view = FakeView(assignments={"t": {0: (0, 1), 1: (1, 2)}})
    assert run(monkeypatch, view, "reassign-partitions", "--zk", "zk:1", "--reassignment-json-file", str(plan),
               "--no-wait") == 0
    moves = paths.decode_partition_list(view.nodes[paths.REASSIGN_PARTITIONS], with_replicas=True)
    assert [(m.topic, m.partition, m.replicas) for m in moves] == [("t", 1, (2, 0)), ("t", 0, (1,))]
    assert "requested" in capsys.readouterr().out


def test_waiting_times_out_with_what_is_left_and_draws_only_on_a_terminal(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(replication_admin.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with pytest.raises(CommandError, match=r"not done after 1 s \(2 left\)"):
        replication_admin.wait_until(lambda: "2 left", timeout_s=1, label="x", failure="not done",
                                     stream=stream, clock=lambda: now[0])
    assert "x: 2 left (0 s)" in stream.getvalue() and stream.getvalue().endswith("\r\x1b[K")
    piped = io.StringIO()
    replication_admin.wait_until(iter(["1 left", None]).__next__, timeout_s=5, label="x", failure="f",
                                 stream=piped, clock=lambda: now[0])
    assert piped.getvalue() == ""


def test_the_listing_marks_replicated_topics_with_their_factor(monkeypatch, capsys):
    view = FakeView(assignments={"r": {0: (0, 1, 2), 1: (1, 2)}}, topics_07={"old"})
    assert run(monkeypatch, view, "topics", "--zk", "zk:1") == 0
    assert [line.split() for line in capsys.readouterr().out.splitlines()] == [
        list(topics.TOPICS_HEADER), ["old", "0", "h:9092", "1"], [],
        list(topics.REPLICATED_HEADER), ["r", "2", "2-3"]]


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_refused_by_the_parser(value, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["preferred-leader-election", "--timeout", value])
    assert exited.value.code == 2 and "--timeout" in capsys.readouterr().err
