"""A broker restarted before its previous run's ZooKeeper session timed out (kill -9, then a
start within the session timeout), against a real ZooKeeper: its previous run's registration,
which would look alive to the controller until the session expires, is deleted at once and
the new run registers (registry/broker_registration.py says why: the simulation's seed
572942149 lost committed messages in that window). A registration of another run of the same
broker id (one this log directory did not record) is still waited for, then refused."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from twisted.internet import reactor
from twisted.internet.task import Clock

from twisted_broker.registry import paths
from twisted_broker.registry.broker_registration import REGISTRATION_FILE, BrokerIdInUse, BrokerRegistration
from twisted_broker.registry.zookeeper import ZooKeeper

SESSION_TIMEOUT_MS = 6000


@pytest.fixture
def previous_run(zookeeper):
    """A session holding broker 7's registration, as a run killed -9 leaves it: still alive."""
    client = KazooClient(hosts=zookeeper.connect_string, timeout=SESSION_TIMEOUT_MS / 1000)
    client.start(10)
    yield client
    client.stop()
    client.close()


def register(zookeeper, log_dir, startup_ms: int, check=lambda registration: None) -> tuple[BrokerRegistration, float]:
    """Register broker 7 as a run started at ``startup_ms``; ``check(registration)`` runs while
    its session (and so its node) lives."""
    # The blocking registration runs before the reactor does (as twistd's start): its state
    # events wait in the reactor's queue, unread.
    zk = ZooKeeper(zookeeper.connect_string, reactor=reactor, session_timeout_ms=SESSION_TIMEOUT_MS)
    registration = BrokerRegistration(zk, broker_id=7, host="127.0.0.1", startup_ms=startup_ms,
                                      partitions_for=lambda topic: 1, session_timeout_ms=SESSION_TIMEOUT_MS,
                                      clock=Clock(), log_dir=str(log_dir))
    started = time.monotonic()
    try:
        registration.register_blocking(9092, [], connect_timeout_s=10)
        took = time.monotonic() - started
        check(registration)
    finally:
        zk.client.stop()
        zk.client.close()
    return registration, took


def test_the_previous_runs_registration_is_deleted_and_the_new_run_registers_at_once(zookeeper, previous_run,
                                                                                    tmp_path):
    old = paths.BrokerInfo(7, paths.creator_id("127.0.0.1", 1000), "127.0.0.1", 9092)
    previous_run.create(paths.broker_id_path(7), old.encode(), ephemeral=True, makepath=True)
    (tmp_path / REGISTRATION_FILE).write_text(old.creator_id + "\n")  # what that run recorded

    def registered_now(registration) -> None:
        value, stat = previous_run.get(paths.broker_id_path(7))
        assert value == registration.info.encode() and stat.ephemeralOwner != previous_run.client_id[0]

    registration, took = register(zookeeper, tmp_path, startup_ms=2000, check=registered_now)
    assert registration.registered
    assert took < SESSION_TIMEOUT_MS / 1000 / 2  # not after the old session's expiry
    assert (tmp_path / REGISTRATION_FILE).read_text().strip() == registration.info.creator_id


def test_a_registration_this_log_directory_did_not_record_is_waited_for_then_refused(zookeeper, previous_run,
                                                                                       tmp_path):
    other = paths.BrokerInfo(7, paths.creator_id("10.0.0.9", 1000), "10.0.0.9", 9092)
    previous_run.create(paths.broker_id_path(7), other.encode(), ephemeral=True, makepath=True)
    (tmp_path / REGISTRATION_FILE).write_text(paths.creator_id("127.0.0.1", 500) + "\n")
    with pytest.raises(BrokerIdInUse, match="already registered"):
        register(zookeeper, tmp_path, startup_ms=2000)
    assert previous_run.get(paths.broker_id_path(7))[0] == other.encode()  # untouched
