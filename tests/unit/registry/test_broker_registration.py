"""BrokerRegistration after a session expiry: registering again survives a connection lost
between its requests (found by the simulation: an unhandled ConnectionLoss from the ``get``
that follows a NodeExistsError stopped the re-registration for good)."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss
from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock

from twisted_broker.registry.broker_registration import BrokerRegistration
from twisted_broker.registry.zookeeper import CONNECTED, LOST, NodeExistsError


class ScriptedZooKeeper:
    """Answers create/get from scripted outcomes; the rest of the interface the class uses."""

    def __init__(self, creates, gets) -> None:
        self.creates, self.gets = list(creates), list(gets)
        self.connected = True
        self.listeners = []
        self.created = []

    def add_state_listener(self, listener) -> None:
        self.listeners.append(listener)

    def _answer(self, outcomes):
        outcome = outcomes.pop(0)
        return fail(outcome) if isinstance(outcome, Exception) else succeed(outcome)

    def create(self, path, value, ephemeral=False):
        answer = self._answer(self.creates)
        answer.addCallback(lambda _: self.created.append(path))
        return answer

    def get(self, path):
        return self._answer(self.gets)

    def event(self, state) -> None:
        for listener in self.listeners:
            listener(state)


def registration(zk, clock):
    return BrokerRegistration(zk, broker_id=3, host="127.0.0.1", startup_ms=1, partitions_for=lambda t: 1,
                              session_timeout_ms=6000, clock=clock)


def test_a_connection_lost_while_reading_the_old_node_is_retried(caplog):
    # The old session's node is still there (NodeExistsError), reading it loses the
    # connection, the next try finds the node gone and creates it.
    zk = ScriptedZooKeeper(creates=[NodeExistsError(), None], gets=[ConnectionLoss()])
    clock = Clock()
    broker = registration(zk, clock)
    zk.event(LOST)
    zk.event(CONNECTED)
    assert not broker.registered
    assert "registering broker 3 failed (ConnectionLoss); retrying" in caplog.text
    clock.advance(1.0)
    assert broker.registered and broker.registrations == 1
    assert zk.created == ["/brokers/ids/3"]


def test_a_connection_still_down_after_the_wait_leaves_it_to_the_next_connected_event():
    zk = ScriptedZooKeeper(creates=[NodeExistsError(), None], gets=[ConnectionLoss()])
    clock = Clock()
    broker = registration(zk, clock)
    zk.event(LOST)
    zk.event(CONNECTED)
    zk.connected = False
    clock.advance(1.0)
    assert not broker.registered and zk.creates == [None]  # gave up; no request while down
    zk.connected = True
    zk.event(CONNECTED)
    assert broker.registered
