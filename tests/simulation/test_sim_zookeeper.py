"""The in-memory ZooKeeper behaves as the kazoo bridge does where replication relies on it."""

from __future__ import annotations

import random

import pytest
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType
from twisted.internet.task import Clock

from tests.simulation.sim_zookeeper import SimZooKeeper, ZooKeeperServer
from twisted_broker.registry.zookeeper import CONNECTED, LOST, SUSPENDED


def _world():
    clock = Clock()
    server = ZooKeeperServer(clock, random.Random(1), lambda line: None)
    return clock, server


def _result(clock, d):
    box = []
    d.addBoth(box.append)
    for _ in range(100):
        if box:
            break
        clock.advance(0.01)
    value = box[0]
    if hasattr(value, "raiseException"):
        value.raiseException()
    return value


def test_versions_and_errors():
    clock, server = _world()
    zk = SimZooKeeper(server, clock, "a")
    zk.start()
    assert _result(clock, zk.create("/x/y", b"1")) == "/x/y"  # parents made
    with pytest.raises(NodeExistsError):
        _result(clock, zk.create("/x/y", b"2"))
    value, stat = _result(clock, zk.get("/x/y"))
    assert (value, stat.version) == (b"1", 0)
    assert _result(clock, zk.set("/x/y", b"2", 0)).version == 1
    with pytest.raises(BadVersionError):
        _result(clock, zk.set("/x/y", b"3", 0))
    with pytest.raises(NoNodeError):
        _result(clock, zk.get("/nope"))
    assert _result(clock, zk.get_children("/x")) == ["y"]


def test_watch_fires_once_and_ephemerals_go_with_the_session():
    clock, server = _world()
    a, b = SimZooKeeper(server, clock, "a", session_timeout_ms=1000), SimZooKeeper(server, clock, "b")
    a.start()
    b.start()
    _result(clock, a.create("/e", b"", ephemeral=True))
    events = []
    assert _result(clock, b.exists("/e", watch=events.append)) is not None
    _result(clock, b.set("/e", b"x"))
    _result(clock, b.set("/e", b"y"))
    assert [e.type for e in events] == [EventType.CHANGED]  # once
    states = []
    a.add_state_listener(states.append)
    a.cut()
    clock.advance(2.0)
    assert "/e" not in server.nodes and states == [SUSPENDED]
    a.heal()
    clock.advance(1.0)
    assert states == [SUSPENDED, LOST, CONNECTED] and a.connected


def test_transaction_all_or_nothing():
    clock, server = _world()
    zk = SimZooKeeper(server, clock, "a")
    zk.start()
    _result(clock, zk.create("/c", b"0"))
    with pytest.raises(BadVersionError):
        _result(clock, zk.transaction([("create", "/t", b"", False), ("check", "/c", 5)]))
    assert "/t" not in server.nodes
    results = _result(clock, zk.transaction([("check", "/c", 0), ("set", "/c", b"1", 0)]))
    assert results[1].version == 1


def test_a_cut_fails_what_is_in_flight_at_once_and_a_heal_brings_the_held_events_at_once():
    # As kazoo: an operation in flight when the loss is noticed fails with ConnectionLoss then;
    # what was held while cut comes once the link is back, not a session timeout after the cut
    # (a leader reconnected on its session then waited that long for its answers, fenced:
    # seed 605869037 of the five mix).
    clock, server = _world()
    a, b = SimZooKeeper(server, clock, "a", session_timeout_ms=6000), SimZooKeeper(server, clock, "b")
    a.start()
    b.start()
    _result(clock, b.create("/w", b"0"))
    events = []
    _result(clock, a.exists("/w", watch=events.append))
    a.cut()
    pending = a.set("/w", b"1", 0)
    outcome = []
    pending.addBoth(outcome.append)
    _result(clock, b.set("/w", b"2", 0))  # fires a's watch while a is cut
    for _ in range(500):
        if a.state == SUSPENDED:
            break
        clock.advance(0.01)
    clock.advance(0.01)
    assert a.state == SUSPENDED and outcome and outcome[0].check(ConnectionLoss) and not events
    cut_at = clock.seconds()
    a.heal()
    clock.advance(1.0)
    assert a.connected and [e.type for e in events] == [EventType.CHANGED]
    assert clock.seconds() - cut_at < 6.0
    assert _result(clock, a.get("/w"))[0] == b"2"
