"""ACLs on real brokers over real sockets with a real ZooKeeper (docs/security.md, "Authorization").

Every connection's principal is User:ANONYMOUS until authentication lands (issue 25's other
half), so the ACLs here allow or deny User:ANONYMOUS: the whole path (ZooKeeper, the cache,
the checks, the clients' errors) is the one a named principal takes. ACLs are written with
``twisted-broker acls`` (ZooKeeper) or the admin clients (CreateAcls, ...).
"""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding as CfAclBinding, AclBindingFilter as CfAclBindingFilter, AclOperation, AclPermissionType,
    AdminClient, NewTopic, ResourcePatternType, ResourceType as CfResourceType,
)
from kafka import KafkaConsumer
from kafka.errors import GroupAuthorizationFailedError

from twisted_broker import cli
from twisted_broker.codec.kafka.api_keys import DESCRIBE_ACLS
from twisted_broker.codec.kafka.protocol import decode_response, encode_request
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication import REPLICA_FETCH, ReplicaFetchPartition, ReplicaFetchRequest
from twisted_broker.codec.kafka07.requests import FetchRequest, ProduceRequest, encode_request as encode_0_7
from tests.support.brokers import WireClient
from tests.support.kafka_clients.kafka_frames import Connection
from tests.support.kafka_clients.modern_cluster import start_modern
from tests.support.polling import wait_for

ANONYMOUS = "User:ANONYMOUS"
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def acls(zk_connect: str, *args: str) -> None:
    assert cli.main(["acls", "--zk", zk_connect, *args]) == 0


def produce(bootstrap: str, topic: str, value: bytes = b"v") -> str | None:
    """Produce one message; None once acknowledged, else the error's name."""
    results = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "retries": 0})
    producer.produce(topic, value, on_delivery=lambda err, msg: results.append(err))
    producer.flush(10)
    return results[0].name() if results and results[0] is not None else None


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def create_topic(bootstrap: str, topic: str) -> KafkaError | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a client collected cancels its futures
    future = admin.create_topics([NewTopic(topic, 1, 1)])[topic]
    try:
        future.result(10)
    except Exception as exc:  # confluent's KafkaException carries the KafkaError
        return exc.args[0]
    return None


@pytest.fixture
def secured(tmp_path, zk_connect):
    broker = start_modern(tmp_path / "b", zk_connect=zk_connect, properties=AUTHORIZER)
    yield broker
    broker.process.stop()


def test_topic_acls_allow_refuse_and_deny_wins(secured, zk_connect):
    bootstrap, log_dir = secured.bootstrap, secured.process.log_dir
    error = create_topic(bootstrap, "t")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not (log_dir / "t-0").exists()  # nothing created

    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Create", "--cluster")
    wait_for(lambda: create_topic(bootstrap, "t") is None, "Create on the cluster reaches the broker")
    assert "t" not in topic_names(bootstrap)  # no Describe: left out of Metadata

    assert produce(bootstrap, "t") == "TOPIC_AUTHORIZATION_FAILED"
    assert (log_dir / "t-0" / "00000000000000000000.kafka").stat().st_size == 0  # nothing written

    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Write", "--topic", "t")
    wait_for(lambda: produce(bootstrap, "t") is None, "Write on the topic reaches the broker", timeout_s=20)
    assert "t" in topic_names(bootstrap)  # Write implies Describe

    acls(zk_connect, "--add", "--deny-principal", ANONYMOUS, "--operation", "Write", "--topic", "t")
    wait_for(lambda: produce(bootstrap, "t") == "TOPIC_AUTHORIZATION_FAILED", "the Deny overrides the Allow",
             timeout_s=20)

    # Prefixed: every topic starting with "team-"; auto-created by Metadata (Create on the cluster).
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Write", "--topic", "team-",
         "--resource-pattern-type", "prefixed")
    wait_for(lambda: produce(bootstrap, "team-a") is None, "a prefixed Allow", timeout_s=20)
    assert produce(bootstrap, "other") == "TOPIC_AUTHORIZATION_FAILED"

    # DeleteTopics without Delete: refused, the topic stays.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics(["team-a"])
    with pytest.raises(Exception) as refused:
        futures["team-a"].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert (log_dir / "team-a-0").exists() and "team-a" in topic_names(bootstrap)


def test_a_group_without_read_cannot_join(secured, zk_connect):
    bootstrap = secured.bootstrap
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "All", "--topic", "g-topic",
         "--operation", "Create", "--cluster")
    wait_for(lambda: produce(bootstrap, "g-topic", b"hello") is None, "the topic's ACLs", timeout_s=20)
    consumer = KafkaConsumer("g-topic", bootstrap_servers=bootstrap, group_id="g", auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(500)
    finally:
        consumer.close()
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Read", "--group", "g")
    time.sleep(0.5)
    consumer = KafkaConsumer("g-topic", bootstrap_servers=bootstrap, group_id="g", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000)
    try:
        assert next(iter(consumer)).value == b"hello"
    finally:
        consumer.close()


def test_super_user_passes_everything(tmp_path, zk_connect):
    broker = start_modern(tmp_path / "b", zk_connect=zk_connect,
                          properties={**AUTHORIZER, "super.users": f"User:admin;{ANONYMOUS}"})
    try:
        assert create_topic(broker.bootstrap, "s") is None
        assert produce(broker.bootstrap, "s") is None
        assert "s" in topic_names(broker.bootstrap)
    finally:
        broker.process.stop()


def test_admin_clients_manage_acls(secured, zk_connect):
    bootstrap = secured.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    binding = CfAclBinding(CfResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(Exception) as refused:  # no Alter on the cluster yet
        admin.create_acls([binding])[binding].result(10)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Alter", "--operation", "Describe",
         "--cluster")
    wait_for(lambda: _created(admin, binding), "Alter on the cluster reaches the broker", timeout_s=20)
    everything = CfAclBindingFilter(CfResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert binding in admin.describe_acls(everything).result(10)
    deleted = admin.delete_acls([CfAclBindingFilter(CfResourceType.TOPIC, "x", ResourcePatternType.MATCH, None,
                                                    None, AclOperation.ANY, AclPermissionType.ANY)])
    assert list(deleted.values())[0].result(10) == [binding]
    assert binding not in admin.describe_acls(everything).result(10)

    # kafka-python's admin client, on the same broker.
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern as KpPattern, ResourcePatternFilter,
                             ResourceType as KpType)
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                  KpPattern(KpType.GROUP, "gr-", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert result["succeeded"] == [acl] and not result["failed"]
        found, error = client.describe_acls(ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                      ResourcePatternFilter(KpType.ANY, None,
                                                                            ACLResourcePatternType.ANY)))
        assert [(a.principal, a.resource_pattern.resource_name) for a in found] == [("User:bob", "gr-")]
        deleted = client.delete_acls([ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                ResourcePatternFilter(KpType.GROUP, "gr-",
                                                                      ACLResourcePatternType.PREFIXED))])
        assert len(deleted[0][1]) == 1
    finally:
        client.close()
    lines = _cli_list(zk_connect)
    assert "User:bob" not in lines and "ClusterAction" not in lines and "Alter" in lines


def _created(admin, binding) -> bool:
    try:
        admin.create_acls([binding])[binding].result(10)
        return True
    except Exception:
        return False


def _cli_list(zk_connect: str) -> str:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        acls(zk_connect, "--list")
    return out.getvalue()


def test_the_0_7_port_follows_the_same_acls(secured, zk_connect):
    port = secured.port
    produce_a = encode_0_7(ProduceRequest("old", 0, encode_message_set([b"m1"])))
    with WireClient(("127.0.0.1", port), 10) as client:  # no Write: the connection closes
        client.send(produce_a)
        assert client.is_closed_by_peer()
    assert "produce to 'old' by User:ANONYMOUS refused" in secured.process.log_tail(20000)
    with WireClient(("127.0.0.1", port), 10) as client:  # no Read: error 29, no messages
        assert client.request(encode_0_7(FetchRequest("old", 0, 0, 4096))) == b"\x00\x1d"
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Write", "--operation", "Read",
         "--topic", "old")
    time.sleep(1.0)

    def produced_and_fetched() -> bool:
        with WireClient(("127.0.0.1", port), 10) as client:
            client.send(produce_a)
            answer = client.request(encode_0_7(FetchRequest("old", 0, 0, 4096)))
        return answer[:2] == b"\x00\x00" and b"m1" in answer
    wait_for(produced_and_fetched, "0.7 produce and fetch allowed", timeout_s=20)


def test_only_cluster_action_may_fetch_as_a_replica(secured, zk_connect):
    fetch = encode_0_7(ReplicaFetchRequest(7, 0, 0, (ReplicaFetchPartition("r", 0, 0, 0, 4096, 0),)), REPLICA_FETCH)
    with WireClient(("127.0.0.1", secured.port), 10) as client:
        client.send(fetch)
        assert client.is_closed_by_peer()
    assert "a replica's fetch by User:ANONYMOUS refused" in secured.process.log_tail(20000)
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "ClusterAction", "--cluster")

    def answered() -> bool:
        with WireClient(("127.0.0.1", secured.port), 10) as client:
            try:
                return client.request(fetch)[:2] == b"\x00\x00"
            except (ConnectionError, socket.timeout):
                return False
    wait_for(answered, "the replica fetch answered with ClusterAction", timeout_s=20)


def describe_acls_count(port: int) -> int:
    frame = encode_request(DESCRIBE_ACLS, 1, 1, "t", {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    with Connection(port) as connection:
        _, body = decode_response(DESCRIBE_ACLS, 1, connection.request(frame))
    if body["error_code"]:  # 31 until the broker has read the ACLs that allow it
        return -1
    return sum(len(resource["acls"]) for resource in body["resources"])


def test_acl_changes_reach_every_broker_of_three_within_seconds(tmp_path, zk_connect):
    acls(zk_connect, "--add", "--allow-principal", ANONYMOUS, "--operation", "Describe", "--operation",
         "ClusterAction", "--cluster")
    brokers = [start_modern(tmp_path / f"b{i}", zk_connect=zk_connect, broker_id=i, properties=AUTHORIZER)
               for i in range(3)]
    try:
        for broker in brokers:
            wait_for(lambda: describe_acls_count(broker.kafka_port) == 2, "each broker loaded the ACLs")
        started = time.monotonic()
        acls(zk_connect, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "fresh")
        seen = {}
        while len(seen) < 3 and time.monotonic() - started < 10:
            for broker in brokers:
                if broker.kafka_port not in seen and describe_acls_count(broker.kafka_port) == 3:
                    seen[broker.kafka_port] = time.monotonic() - started
            time.sleep(0.02)
        assert len(seen) == 3, seen
        assert max(seen.values()) < 3.0, seen  # measured ~0.05 s on loopback
    finally:
        for broker in brokers:
            broker.process.stop()
