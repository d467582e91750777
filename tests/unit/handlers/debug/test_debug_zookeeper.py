"""The debug port's zk ls and zk get (server/debug_commands.py), against a fake ZooKeeper bridge
whose answers the tests control, with real logs and a task.Clock (debug_fixtures.py).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed

from tests.unit.handlers.debug.debug_fixtures import clock, commands, logs, run, stats  # noqa: F401 (fixtures)
from twisted_broker.registry.zookeeper import NoNodeError
from twisted_broker.handlers.debug.commands import MAX_ZK_CHILDREN, Answer, DebugCommands


class FakeZooKeeper:
    """The two reads of the bridge; ``hold`` makes them wait for a Deferred the test fires."""

    def __init__(self, nodes: dict[str, tuple[bytes, list[str]]]) -> None:
        self.nodes = nodes
        self.hold: Deferred | None = None

    def _answer(self, path: str, pick):
        if self.hold is not None:
            return self.hold
        if path not in self.nodes:
            return fail(NoNodeError())
        return succeed(pick(self.nodes[path]))

    def get_children(self, path: str) -> Deferred:
        return self._answer(path, lambda node: list(node[1]))

    def get(self, path: str) -> Deferred:
        return self._answer(path, lambda node: (node[0], Stat(len(node[0]), len(node[1]))))


class Stat:
    """The fields of kazoo's ZnodeStat that ``zk get`` shows."""

    def __init__(self, data_length: int, children: int) -> None:
        self.dataLength, self.numChildren = data_length, children
        self.version = 3
        self.ctime, self.mtime = 1_700_000_000_000, 1_700_000_001_500
        self.ephemeralOwner = 0x1234abcd


def zk_commands(logs, stats, clock, zk) -> DebugCommands:
    return DebugCommands(logs, stats, clock=clock, broker_id=0, zk=zk, zk_timeout_s=5)


def test_zk_without_zookeeper_is_an_error(commands):
    assert run(commands, "zk ls /brokers/ids") == ["error: ZooKeeper is not enabled"]


def test_zk_ls_lists_the_children_sorted(logs, stats, clock):
    zk = FakeZooKeeper({"/brokers/ids": (b"", ["2", "10", "1"]), "/empty": (b"", [])})
    commands = zk_commands(logs, stats, clock, zk)
    assert run(commands, "zk ls /brokers/ids") == ["1", "10", "2"]
    assert run(commands, "zk ls /empty") == ["(no children of /empty)"]
    assert run(commands, "zk ls /nope") == ["error: no ZooKeeper node /nope"]


def test_zk_get_shows_the_data_escaped_and_the_stat(logs, stats, clock):
    zk = FakeZooKeeper({"/brokers/ids/0": (b"host-1:127.0.0.1:9092\x00\xff", [])})
    assert run(zk_commands(logs, stats, clock, zk), "zk get /brokers/ids/0") == [
        'data             "host-1:127.0.0.1:9092\\x00\\xff"',
        "data length      23",
        "version          3",
        "children         0",
        "created          2023-11-14 22:13:20.000 UTC",
        "modified         2023-11-14 22:13:21.500 UTC",
        "ephemeral owner  0x1234abcd"]


def test_zk_paths_are_checked_before_asking(logs, stats, clock):
    commands = zk_commands(logs, stats, clock, FakeZooKeeper({}))
    for path in ("brokers", "/brokers/", "/a//b", "/a/../b"):
        assert run(commands, f"zk ls {path}")[0].startswith("error: PATH ")
    assert run(commands, "zk rm /a") == ["error: usage: zk ls PATH | zk get PATH"]


def test_zk_that_does_not_answer_times_out(logs, stats, clock):
    zk = FakeZooKeeper({})
    zk.hold = Deferred()
    answers = []
    zk_commands(logs, stats, clock, zk).execute("zk ls /").addCallback(answers.append)
    assert answers == []
    clock.advance(5)
    assert answers == [Answer(["error: ZooKeeper did not answer within 5 s"])]


def test_zk_failures_are_error_answers(logs, stats, clock):
    zk = FakeZooKeeper({})
    zk.hold = fail(ConnectionError("connection lost"))
    assert run(zk_commands(logs, stats, clock, zk), "zk get /") == [
        "error: ZooKeeper: ConnectionError connection lost"]


def test_zk_ls_of_a_crowded_node_is_cut(logs, stats, clock):
    zk = FakeZooKeeper({"/consumers": (b"", [f"c{i:05d}" for i in range(MAX_ZK_CHILDREN + 7)])})
    lines = run(zk_commands(logs, stats, clock, zk), "zk ls /consumers")
    assert len(lines) == MAX_ZK_CHILDREN + 1
    assert lines[-1] == "(and 7 more)"
