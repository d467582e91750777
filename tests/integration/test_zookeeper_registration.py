"""A real broker's nodes in a real ZooKeeper (spec 5.2, 5.4): values, modes and lifecycles.

``/brokers/ids/<id>`` and ``/brokers/topics/<t>/<id>`` are ephemeral: they must appear when a
broker starts or creates a topic, vanish when its session ends (at once on a clean stop, after
the session timeout on a crash), and come back by themselves after a session expiry.
Brokers run with zk.sessiontimeout.ms=2000 against a ZooKeeper whose tickTime is 200 ms.
"""

from __future__ import annotations

import re
import signal
import time
import uuid

import pytest
from kazoo.client import KazooClient

from tests.support.polling import fetch_payloads, produce_payloads, wait_for, wait_for_payloads
from twisted_broker.codec.kafka07.requests import OffsetRequest, encode_request
from twisted_broker.codec.kafka07.responses import decode_error_and_body, decode_offsets
from twisted_broker.local_zookeeper import ZooKeeperServer, free_port

SESSION_TIMEOUT_S = 2.0  # the broker fixture's zk.sessiontimeout.ms
BROKER_VALUE = re.compile(r"(?P<creator_host>[^:]+)-(?P<startup_ms>[0-9]+):(?P<host>[^:]+):(?P<port>[0-9]+)")


# -- helpers ---------------------------------------------------------------------------------

def wait_for_node(zk: KazooClient, path: str, timeout_s: float = 10.0):
    """(data, stat) of ``path`` once it exists."""
    def get():
        if zk.exists(path):
            return zk.get(path)
        return None
    return wait_for(get, f"{path} to exist", timeout_s)


def wait_until_gone(zk: KazooClient, path: str, timeout_s: float = 10.0) -> float:
    """Wait until ``path`` no longer exists; return time.monotonic() when it was seen gone."""
    wait_for(lambda: zk.exists(path) is None, f"{path} to vanish", timeout_s, interval_s=0.02)
    return time.monotonic()


def owner(zk: KazooClient, path: str) -> int | None:
    """The session owning the ephemeral ``path`` (0 if persistent), None if there is no node."""
    stat = zk.exists(path)
    return None if stat is None else stat.ephemeralOwner


def kazoo(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)
    client.start(10)
    return client


def close(client: KazooClient) -> None:
    client.stop()
    client.close()


def latest_offsets(broker, topic: str, partition: int) -> list[int]:
    with broker.connect() as client:
        error, body = decode_error_and_body(
            client.request(encode_request(OffsetRequest(topic, partition, -1, 10))))
    assert error == 0
    return decode_offsets(body)


def assert_persistent_and_empty(zk: KazooClient, path: str) -> None:
    data, stat = zk.get(path)
    assert (data, stat.ephemeralOwner) == (b"", 0), path


# -- fixtures --------------------------------------------------------------------------------

@pytest.fixture
def zk(zk_connect) -> KazooClient:
    """A kazoo client inside the test's chroot, as consumers and producers see the registry."""
    client = kazoo(zk_connect)
    yield client
    close(client)


@pytest.fixture
def private_zookeeper(tmp_path):
    """A ZooKeeper of this test's own, which it may stop, move and restart."""
    server = ZooKeeperServer(tmp_path / "private-zookeeper", tick_time_ms=200)
    server.start()
    yield server
    server.stop()


# -- registration ----------------------------------------------------------------------------

def test_two_brokers_register_ephemeral_ids_valued_creator_host_and_bound_port(
        broker_factory, zk_connect, zk):
    window_start_ms = int(time.time() * 1000)
    brokers = [broker_factory(f"b{broker_id}", broker_id=broker_id, zk_connect=zk_connect)
               for broker_id in (0, 1)]
    nodes = [wait_for_node(zk, f"/brokers/ids/{broker.broker_id}") for broker in brokers]
    window_end_ms = int(time.time() * 1000)

    for broker, (data, stat) in zip(brokers, nodes):
        match = BROKER_VALUE.fullmatch(data.decode("utf-8"))
        assert match, data
        assert match["creator_host"] == match["host"] == "127.0.0.1"
        assert int(match["port"]) == broker.port
        assert window_start_ms <= int(match["startup_ms"]) <= window_end_ms
        assert stat.ephemeralOwner != 0
    assert nodes[0][1].ephemeralOwner != nodes[1][1].ephemeralOwner  # one session per broker
    assert sorted(zk.get_children("/brokers/ids")) == ["0", "1"]
    assert_persistent_and_empty(zk, "/brokers")
    assert_persistent_and_empty(zk, "/brokers/ids")


def test_topic_created_by_produce_registers_ephemerally_with_the_configured_partition_count(
        broker_factory, zk_connect, zk):
    # Each broker publishes its own configured count, not the partitions it has on disk.
    b0 = broker_factory("b0", broker_id=0, zk_connect=zk_connect,
                        properties={"num.partitions": "2", "topic.partition.count.map": "wide:4"})
    b1 = broker_factory("b1", broker_id=1, zk_connect=zk_connect,
                        properties={"num.partitions": "3"})
    _, id_stat = wait_for_node(zk, "/brokers/ids/0")
    assert not zk.exists("/brokers/topics/wide/0")

    produce_payloads(b0, "wide", 3, [b"w"])
    produce_payloads(b0, "narrow", 1, [b"n"])
    produce_payloads(b1, "wide", 0, [b"w1"])

    assert sorted(path.name for path in b0.log_dir.iterdir() if path.is_dir()) == ["narrow-1", "wide-3"]
    wide_0, wide_0_stat = wait_for_node(zk, "/brokers/topics/wide/0")
    narrow_0, narrow_0_stat = wait_for_node(zk, "/brokers/topics/narrow/0")
    wide_1, wide_1_stat = wait_for_node(zk, "/brokers/topics/wide/1")
    assert (wide_0, narrow_0, wide_1) == (b"4", b"2", b"3")
    # The topic nodes belong to the broker's session, as its id node does.
    assert wide_0_stat.ephemeralOwner == narrow_0_stat.ephemeralOwner == id_stat.ephemeralOwner
    assert wide_1_stat.ephemeralOwner not in (0, id_stat.ephemeralOwner)
    assert sorted(zk.get_children("/brokers/topics")) == ["narrow", "wide"]
    assert sorted(zk.get_children("/brokers/topics/wide")) == ["0", "1"]
    for path in ("/brokers/topics", "/brokers/topics/wide", "/brokers/topics/narrow"):
        assert_persistent_and_empty(zk, path)


def test_topics_on_disk_register_again_when_the_broker_restarts(broker_factory, zk_connect, zk):
    broker = broker_factory("b0", broker_id=0, zk_connect=zk_connect,
                            properties={"num.partitions": "2", "topic.partition.count.map": "wide:4"})
    produce_payloads(broker, "wide", 3, [b"w"])
    produce_payloads(broker, "narrow", 0, [b"n"])
    wait_for_payloads(broker, "wide", 3, [b"w"])
    wait_for_node(zk, "/brokers/topics/wide/0")
    wait_for_node(zk, "/brokers/topics/narrow/0")

    assert broker.stop() == -signal.SIGTERM
    assert zk.get_children("/brokers/topics/wide") == []
    assert zk.get_children("/brokers/topics/narrow") == []

    broker.start()  # no produce this time: the logs on disk are enough
    _, id_stat = wait_for_node(zk, "/brokers/ids/0")
    wide, wide_stat = wait_for_node(zk, "/brokers/topics/wide/0")
    narrow, narrow_stat = wait_for_node(zk, "/brokers/topics/narrow/0")
    assert (wide, narrow) == (b"4", b"2")
    assert wide_stat.ephemeralOwner == narrow_stat.ephemeralOwner == id_stat.ephemeralOwner != 0


# -- nodes vanish with the session -----------------------------------------------------------

def test_killed_broker_nodes_vanish_once_its_session_times_out(broker_factory, zk_connect, zk):
    broker = broker_factory("b0", broker_id=0, zk_connect=zk_connect)
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_node(zk, "/brokers/topics/t/0")

    broker.kill()
    killed = time.monotonic()
    # Nobody closed the session: ZooKeeper keeps the nodes until the session times out.
    time.sleep(0.5)
    assert zk.exists("/brokers/ids/0") and zk.exists("/brokers/topics/t/0")
    gone = wait_until_gone(zk, "/brokers/ids/0", timeout_s=3 * SESSION_TIMEOUT_S)
    assert not zk.exists("/brokers/topics/t/0")
    # The session's last heartbeat may precede the kill by up to a third of the timeout.
    assert SESSION_TIMEOUT_S / 2 < gone - killed < SESSION_TIMEOUT_S + 1.0


def test_cleanly_stopped_broker_nodes_vanish_at_once(broker_factory, zk_connect, zk):
    broker = broker_factory("b0", broker_id=0, zk_connect=zk_connect)
    produce_payloads(broker, "t", 0, [b"x"])
    wait_for_node(zk, "/brokers/topics/t/0")
    deleted = {}
    for path in ("/brokers/ids/0", "/brokers/topics/t/0"):
        zk.exists(path, watch=lambda event: deleted.setdefault(event.path, (time.monotonic(), event.type)))

    stopping = time.monotonic()
    assert broker.stop() == -signal.SIGTERM

    wait_for(lambda: len(deleted) == 2, "both deletions to be watched", timeout_s=SESSION_TIMEOUT_S)
    for path, (when, event_type) in deleted.items():
        assert event_type == "DELETED", path
        assert when - stopping < 1.0, path  # the session was closed, not left to time out
    log = broker.log_tail()
    assert "broker stopped cleanly" in log
    assert "session expired" not in log and "register again" not in log


# -- session expiry --------------------------------------------------------------------------

def test_broker_serves_without_zookeeper_and_registers_again_after_its_session_expired(
        broker_factory, private_zookeeper):
    server = private_zookeeper
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    setup = kazoo(server.connect_string)
    setup.ensure_path(chroot)
    close(setup)
    broker = broker_factory("b0", broker_id=0, zk_connect=server.connect_string + chroot,
                            properties={"num.partitions": "2"})
    zk = kazoo(server.connect_string + chroot)
    try:
        produce_payloads(broker, "before", 0, [b"b"])
        wait_for_node(zk, "/brokers/topics/before/0")
        _, old = wait_for_node(zk, "/brokers/ids/0")
    finally:
        close(zk)

    # Expire the broker's session for real: restart ZooKeeper (same data directory) on a
    # port the broker does not know, so the session gets no heartbeat and times out there.
    # A restart on the same port would not do: the broker would resume its session.
    home_port = server.port
    server.stop()
    server.port = free_port()
    server.start()
    zk = kazoo(server.connect_string + chroot)
    try:
        wait_until_gone(zk, "/brokers/ids/0", timeout_s=5 * SESSION_TIMEOUT_S)
        assert not zk.exists("/brokers/topics/before/0")
    finally:
        close(zk)
    server.stop()

    # No ZooKeeper at all now: the broker goes on serving produce, fetch and offsets,
    # including a topic it creates meanwhile.
    sent = produce_payloads(broker, "during", 1, [b"d1", b"d2"])
    wait_for_payloads(broker, "during", 1, [b"d1", b"d2"])
    assert latest_offsets(broker, "during", 1)[0] == len(sent)
    assert fetch_payloads(broker, "before", 0) == [b"b"]

    server.port = home_port
    server.start()
    zk = kazoo(server.connect_string + chroot)
    try:
        data, new = wait_for_node(zk, "/brokers/ids/0", timeout_s=15)
        assert new.ephemeralOwner not in (0, old.ephemeralOwner)  # a new session
        match = BROKER_VALUE.fullmatch(data.decode("utf-8"))
        assert match and (match["host"], int(match["port"])) == ("127.0.0.1", broker.port)
        before, before_stat = wait_for_node(zk, "/brokers/topics/before/0")
        during, during_stat = wait_for_node(zk, "/brokers/topics/during/0")
        assert (before, during) == (b"2", b"2")
        assert before_stat.ephemeralOwner == during_stat.ephemeralOwner == new.ephemeralOwner
    finally:
        close(zk)
    log = broker.log_tail(20000)
    assert "ZooKeeper session expired: broker 0 will register again" in log
    assert "registered broker 0 in ZooKeeper again" in log
    assert broker.process.poll() is None


# -- broker id conflicts ---------------------------------------------------------------------

def test_second_broker_with_a_registered_id_refuses_to_start_with_one_error_line(broker_factory, zk_connect, zk,
                                                                                 tmp_path):
    first = broker_factory("first", broker_id=3, zk_connect=zk_connect)
    value, stat = wait_for_node(zk, "/brokers/ids/3")

    with pytest.raises(RuntimeError) as refused:
        broker_factory("second", broker_id=3, zk_connect=zk_connect)
    message = str(refused.value)
    assert re.search(r"broker exited with [1-9]", message), message
    assert "broker id 3 is already registered" in message
    # An operator's mistake, not a bug: one error line (twistd sends stderr to its log), no traceback.
    log = (tmp_path / "second" / "twistd.log").read_text()
    assert "Traceback" not in message and "Traceback" not in log, message
    errors = [line for line in log.splitlines() if "#error]" in line or "#critical]" in line]
    assert len(errors) == 1 and "refusing to start: broker id 3 is already registered" in errors[0], log

    assert first.process.poll() is None
    assert zk.get("/brokers/ids/3") == (value, stat)  # untouched, still the first's session
    produce_payloads(first, "t", 0, [b"still here"])
    wait_for_payloads(first, "t", 0, [b"still here"])


def test_broker_restarted_right_after_kill_waits_out_its_old_session(broker_factory, zk_connect, zk):
    broker = broker_factory("b0", broker_id=0, zk_connect=zk_connect)
    produce_payloads(broker, "t", 0, [b"before"])
    wait_for_payloads(broker, "t", 0, [b"before"])
    _, old = wait_for_node(zk, "/brokers/topics/t/0")

    broker.kill()
    # Not timed out yet: both nodes still belong to the dead broker's session.
    assert owner(zk, "/brokers/ids/0") == owner(zk, "/brokers/topics/t/0") == old.ephemeralOwner
    broker.start()  # returns once registered (it writes its port file last)

    data, new = zk.get("/brokers/ids/0")
    assert new.ephemeralOwner not in (0, old.ephemeralOwner)
    assert int(BROKER_VALUE.fullmatch(data.decode())["port"]) == broker.port
    wait_for(lambda: owner(zk, "/brokers/topics/t/0") == new.ephemeralOwner,
             "the topic node of the new session")
    assert broker.process.poll() is None
    produce_payloads(broker, "t", 0, [b"back"])
    wait_for_payloads(broker, "t", 0, [b"before", b"back"])


# -- without ZooKeeper -----------------------------------------------------------------------

def test_broker_with_zookeeper_disabled_runs_alone(broker_factory):
    broker = broker_factory("alone")  # enable.zookeeper=false, no zk.connect
    produce_payloads(broker, "t", 0, [b"solo"])
    wait_for_payloads(broker, "t", 0, [b"solo"])
    log = broker.log_tail(20000)
    assert "kazoo" not in log and "ZooKeeper" not in log
    assert broker.stop() == -signal.SIGTERM
