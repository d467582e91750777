"""The modern listener on a real ``twistd -n broker``, with kafka-python as the client:
cluster metadata, topic creation and deletion, and bad input on the port."""

from __future__ import annotations

import socket
import struct

from kafka.admin import NewTopic

from tests.support.modern_listener import admin, start_with_listener
from tests.support.polling import produce_payloads, wait_for

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


def test_metadata_advertises_the_listener_with_the_broker_id_and_itself_as_controller(broker_factory):
    _broker, port = start_with_listener(broker_factory, broker_id=7)
    client = admin(port)
    try:
        cluster = client.describe_cluster()
    finally:
        client.close()
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(7, "127.0.0.1", port)]
    assert cluster["controller_id"] == 7


def test_create_topics_registers_in_zookeeper_and_delete_topics_removes_it(broker_factory, zk_connect, zk):
    broker, port = start_with_listener(broker_factory, zk_connect=zk_connect, properties={"num.partitions": "2"})
    client = admin(port)
    try:
        client.create_topics([NewTopic("plain", 2, 1), NewTopic("spread", 3, 1)])
        described = {t["name"]: t for t in client.describe_topics(["plain", "spread"])}
        assert sorted(p["partition_index"] for p in described["plain"]["partitions"]) == [0, 1]
        assert sorted(p["partition_index"] for p in described["spread"]["partitions"]) == [0, 1, 2]
        # num.partitions and factor 1: a 0.7 topic; any other count: a replicated one.
        assert wait_for(lambda: zk.exists("/brokers/topics/plain/0"), "plain registered")
        assert zk.exists("/replication/topics/spread")
        assert all(p["leader_id"] == 0 for t in described.values() for p in t["partitions"])
        client.delete_topics(["spread"])
        assert wait_for(lambda: not zk.exists("/replication/topics/spread"), "spread deleted")
        # Gone from the metadata too, its replica logs deleted (before: they stayed, and the
        # topic was listed on as a 0.7 topic of this broker).
        assert wait_for(lambda: "spread" not in client.list_topics(), "spread gone from the metadata")
        assert not any(d.name.startswith("spread-") for d in broker.log_dir.iterdir())
    finally:
        client.close()


def test_a_topic_made_by_the_0_7_port_appears_in_metadata(broker_factory):
    broker, port = start_with_listener(broker_factory)
    produce_payloads(broker, "old", 0, [b"hello"])
    client = admin(port)
    try:
        assert "old" in client.list_topics()
    finally:
        client.close()


def test_garbage_closes_only_its_connection(broker_factory):
    broker, port = start_with_listener(broker_factory)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as bad, \
            socket.create_connection(("127.0.0.1", port), timeout=5) as good:
        bad.sendall(b"\x00\x00\x00\x08GET / HT")
        assert bad.recv(1) == b""
        good.sendall(API_VERSIONS_V0)
        size, correlation_id, error = struct.unpack(">iih", good.recv(10))
        assert (correlation_id, error) == (1, 0)
    assert "closing connection from 127.0.0.1" in broker.log_tail()
