"""The controller and its ZooKeeper cache in the test's process, against the real ZooKeeper
(tests/support/zookeeper.py's, a fresh chroot per test) through the broker's own kazoo bridge
on the test reactor: what the broker runs, without logs or listeners. The brokers the
controller sees are ephemeral ``/brokers/ids/<id>`` nodes the test writes with kazoo, so a
broker's death, its quick restart (a new registration, a new czxid) or a newer controller
are one ZooKeeper write each and the test takes seconds."""

from __future__ import annotations

import socket
import time

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.task import deferLater

from tests.support.faults.tcp_proxy import BlackholeProxy
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.registry.zookeeper import ZooKeeper
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.controller import Controller


class InProcessController:
    """Broker ``broker_id``'s ClusterState and Controller on its own ZooKeeper session (which
    also holds its /brokers/ids registration, as a broker's does)."""

    def __init__(self, broker_id: int, zk_connect: str) -> None:
        self.broker_id = broker_id
        self.zk = ZooKeeper(zk_connect, reactor=reactor, session_timeout_ms=4000)
        self.cluster = ClusterState(self.zk)
        self.controller = Controller(broker_id=broker_id, zk=self.zk, cluster=self.cluster, clock=reactor)
        self.stopped = None

    @inlineCallbacks
    def start(self, *, register: bool = True, before=()):
        """Connect, register, then start the controller and the cache (``before``: subscribers
        placed ahead of the controller's, as the replica manager's is in a broker)."""
        yield self.zk.start(10)
        if register:
            info = registry_paths.BrokerInfo(self.broker_id, f"127.0.0.1-{self.broker_id}", "127.0.0.1", 9000)
            yield self.zk.create(registry_paths.broker_id_path(self.broker_id), info.encode(), ephemeral=True)
        self.cluster.subscribers.extend(before)
        self.controller.start()
        self.cluster.start()
        return self

    def stop(self):
        self.controller.stop()
        if self.stopped is None:
            self.stopped = self.zk.stop()
        return self.stopped


def register(zk, broker_id: int, creator: str | None = None) -> None:
    """Broker ``broker_id``'s ephemeral registration, on kazoo client ``zk``'s session."""
    info = registry_paths.BrokerInfo(broker_id, creator or f"127.0.0.1-{broker_id}", "127.0.0.1", 9000 + broker_id)
    zk.create(registry_paths.broker_id_path(broker_id), info.encode(), ephemeral=True, makepath=True)


def reregister(zk, broker_id: int, creator: str | None = None) -> None:
    """A quick restart: the old registration goes and a new one comes in one ZooKeeper
    transaction, so no watcher can see the broker gone (only its new czxid)."""
    path = registry_paths.broker_id_path(broker_id)
    value, _ = zk.get(path)
    info = registry_paths.BrokerInfo.decode(broker_id, value)
    new = registry_paths.BrokerInfo(broker_id, creator or info.creator_id, info.host, info.port)
    transaction = zk.transaction()
    transaction.delete(path)
    transaction.create(path, new.encode(), ephemeral=True)
    results = transaction.commit()
    assert not any(isinstance(r, Exception) for r in results), results


def create_topic(zk, topic: str, replicas: dict[int, tuple[int, ...]]) -> None:
    zk.create(paths.topic_path(topic), TopicAssignment(replicas).encode(), makepath=True)


def write_state(zk, topic: str, partition: int, state: PartitionState) -> None:
    path = paths.state_path(topic, partition)
    if zk.exists(path):
        zk.set(path, state.encode())
    else:
        zk.create(path, state.encode(), makepath=True)


def read_state(zk, topic: str, partition: int) -> tuple[PartitionState, object]:
    value, stat = zk.get(paths.state_path(topic, partition))
    return PartitionState.decode(value), stat


def read_assignment(zk, topic: str) -> TopicAssignment:
    return TopicAssignment.decode(zk.get(paths.topic_path(topic))[0])


@inlineCallbacks
def wait_until(condition, what: str, timeout_s: float = 10.0):
    """Poll ``condition`` on the reactor (it reads the blocking kazoo client or the cache)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        yield deferLater(reactor, 0.05, lambda: None)


def settle(seconds: float):
    """Let the reactor run (a write that must NOT happen has had its chance)."""
    return deferLater(reactor, seconds, lambda: None)


class ResettableProxy(BlackholeProxy):
    """The fault proxy, plus ``reset``: every proxied connection closed at once (a dropped
    connection the client sees immediately; it reconnects through the proxy, same session)."""

    def reset(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


@pytest.fixture
def zk_proxy(zk_connect):
    """(proxy, connect string through it to the test's chroot)."""
    hosts, chroot = zk_connect.split("/", 1)
    host, port = hosts.split(",")[0].rsplit(":", 1)
    proxy = ResettableProxy((host, int(port)))
    yield proxy, f"{proxy.connect_string}/{chroot}"
    proxy.close()


@pytest.fixture
def controllers(zk_connect):
    """Start InProcessControllers with ``yield controllers(broker_id, ...)``; all stopped at the end."""
    started: list[InProcessController] = []

    def start(broker_id: int, connect: str | None = None, **options):
        node = InProcessController(broker_id, connect or zk_connect)
        started.append(node)
        return node.start(**options)

    yield start
    for node in started:
        if node.stopped is None:
            pytest_twisted.blockon(node.stop())
