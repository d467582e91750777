"""ACLs for authenticated principals (docs/security.md, "Authorization"): users logged in over
SASL_PLAINTEXT and SASL_SSL, and client certificates on the SSL listener and on the 0.7 port
(security.inter.broker.protocol=SSL with ssl.client.auth=required), each allowed only what its
ACLs say. One broker with every listener and the authorizer on for the module; users made by
``twisted-broker users`` (alice SCRAM-SHA-256, bob SCRAM-SHA-512, admin in ``super.users``);
ACLs written by ``twisted-broker acls``; real clients (confluent-kafka, kafka-python). Each
test names its own topics and groups, so the ACLs one test adds do not reach another's.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kazoo.client import KazooClient
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from twisted_broker import cli
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest, ProduceRequest, encode_request as encode_0_7
from tests.support.cli import run_cli
from tests.support.kafka_clients.secure import (
    CLIENT_SUBJECT, OTHER_SUBJECT, Login, SecureBroker, kafka07_tls_client, kafka_python_config, librdkafka_config,
    start_secure,
)
from tests.support.polling import wait_for
from tests.support.zookeeper import new_chroot

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
              "security.inter.broker.protocol": "SSL"}
ALICE = Login("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-secret")
ALICE_TLS = Login("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-secret")
BOB = Login("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", "bob-secret")
ADMIN = Login("SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret")
CAROL = Login("SSL", certificate=True)  # User:CN=carol,OU=eng,O=corp
CAROL_OPS = Login("SSL", other_certificate=True)  # User:CN=carol,OU=ops,O=corp


@pytest.fixture(scope="module")
def secure(zookeeper, tmp_path_factory):
    chroot = new_chroot(zookeeper)
    done = run_cli("users", "--zk", chroot, "--add", "admin", "--mechanism", "SCRAM-SHA-256", "--password",
                   "admin-secret")
    assert done.returncode == 0, done.stderr
    broker = start_secure(tmp_path_factory.mktemp("acl-principals"), chroot, extra=AUTHORIZER)
    yield broker
    broker.process.kill()


def acls(broker: SecureBroker, *args: str) -> None:
    assert cli.main(["acls", "--zk", broker.zk_connect, *args]) == 0


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- each client, as one login ----------------------------------------------------------------

def produce(broker: SecureBroker, login: Login, topic: str, value: bytes = b"v", **config) -> str | None:
    """Produce one message with confluent-kafka; None once acknowledged, else the error's name."""
    results = []
    producer = Producer({**librdkafka_config(broker, login), "message.timeout.ms": 5000, "retries": 0, **config})
    try:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: results.append(err))
        producer.flush(10)
    except KafkaException as exc:  # a fatal error (an idempotent producer's InitProducerId refused)
        return exc.args[0].name()
    return results[0].name() if results and results[0] is not None else None


def consume(broker: SecureBroker, login: Login, topic: str) -> list[bytes]:
    """kafka-python, assigned partition 0, from the beginning: the values; raises the fetch's error."""
    consumer = KafkaConsumer(**kafka_python_config(broker, login), enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        found, deadline = [], time.monotonic() + 10
        while not found and time.monotonic() < deadline:
            found += [m.value for batch in consumer.poll(200).values() for m in batch]
        return found
    finally:
        consumer.close()


def admin(broker: SecureBroker, login: Login) -> AdminClient:
    return AdminClient(librdkafka_config(broker, login))


def create_topic(broker: SecureBroker, login: Login, topic: str, partitions: int = 1) -> KafkaError | None:
    client = admin(broker, login)  # kept: a client collected cancels its futures
    try:
        client.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    except Exception as exc:  # confluent's KafkaException carries the KafkaError
        return exc.args[0]
    return None


def delete_topic(broker: SecureBroker, login: Login, topic: str) -> KafkaError | None:
    client = admin(broker, login)
    try:
        client.delete_topics([topic])[topic].result(10)
    except Exception as exc:
        return exc.args[0]
    return None


def topic_names(broker: SecureBroker, login: Login) -> set[str]:
    return set(admin(broker, login).list_topics(timeout=10).topics)


def made(broker: SecureBroker, topic: str) -> str:
    """``topic``, created by the super user (who needs no ACL)."""
    assert create_topic(broker, ADMIN, topic) is None
    return topic


def log_bytes(broker: SecureBroker, topic: str) -> int:
    return sum(f.stat().st_size for f in (broker.process.log_dir / f"{topic}-0").glob("*.kafka"))


# -- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("login", [ALICE, ALICE_TLS], ids=["SASL_PLAINTEXT", "SASL_SSL"])
def test_write_without_read_produces_and_cannot_consume(secure, login):
    topic = made(secure, name("w"))
    assert produce(secure, login, topic) == "TOPIC_AUTHORIZATION_FAILED"  # nothing allowed yet
    assert log_bytes(secure, topic) == 0
    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic)
    wait_for(lambda: produce(secure, login, topic, b"written") is None, "alice's Write", timeout_s=20)
    with pytest.raises(TopicAuthorizationFailedError):
        consume(secure, login, topic)
    assert produce(secure, BOB, topic) == "TOPIC_AUTHORIZATION_FAILED"  # the ACL names alice only
    assert consume(secure, ADMIN, topic) == [b"written"]  # what alice wrote is there


def test_a_prefixed_allow_covers_every_topic_with_the_prefix_for_that_user_only(secure):
    prefix = name("bob") + "-"
    first, second, outside = made(secure, prefix + "a"), made(secure, prefix + "b"), made(secure, name("other"))
    acls(secure, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--operation", "Read",
         "--topic", prefix, "--resource-pattern-type", "prefixed")
    wait_for(lambda: produce(secure, BOB, first, b"one") is None, "bob's prefixed Allow", timeout_s=20)
    assert produce(secure, BOB, second, b"two") is None
    assert consume(secure, BOB, second) == [b"two"]
    assert produce(secure, BOB, outside) == "TOPIC_AUTHORIZATION_FAILED"
    assert produce(secure, ALICE, first) == "TOPIC_AUTHORIZATION_FAILED"


def test_a_deny_overrides_an_allow(secure):
    topic = made(secure, name("deny"))
    acls(secure, "--add", "--allow-principal", "User:*", "--operation", "Write", "--topic", topic)
    acls(secure, "--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", topic)
    wait_for(lambda: produce(secure, ALICE, topic) is None, "everyone's Allow", timeout_s=20)
    assert produce(secure, BOB, topic) == "TOPIC_AUTHORIZATION_FAILED"
    before = log_bytes(secure, topic)
    assert produce(secure, BOB, topic) == "TOPIC_AUTHORIZATION_FAILED" and log_bytes(secure, topic) == before


def test_a_super_user_passes_everything_without_an_acl(secure):
    topic = name("super")
    assert create_topic(secure, ADMIN, topic, partitions=2) is None  # a replicated topic: deletable
    assert produce(secure, ADMIN, topic, b"admin's") is None
    assert consume(secure, ADMIN, topic) == [b"admin's"]
    assert topic in topic_names(secure, ADMIN)
    assert delete_topic(secure, ADMIN, topic) is None
    zk = KazooClient(hosts=secure.zk_connect)
    zk.start(10)
    try:
        wait_for(lambda: not zk.exists(f"/replication/topics/{topic}"), "the topic deleted")
    finally:
        zk.stop()
        zk.close()


def test_a_topic_not_described_is_absent_from_that_users_metadata(secure):
    hidden, shown = made(secure, name("hidden")), made(secure, name("shown"))
    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", shown)
    wait_for(lambda: shown in topic_names(secure, ALICE), "alice's Describe", timeout_s=20)
    assert hidden not in topic_names(secure, ALICE)
    assert {hidden, shown} <= topic_names(secure, ADMIN)


def test_a_group_without_read_cannot_join(secure):
    topic, group = made(secure, name("g-topic")), name("group")
    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
         "--topic", topic)
    wait_for(lambda: produce(secure, ALICE, topic, b"hello") is None, "alice's topic ACLs", timeout_s=20)

    def member(timeout_ms: int) -> KafkaConsumer:
        return KafkaConsumer(topic, **kafka_python_config(secure, ALICE), group_id=group,
                             auto_offset_reset="earliest", consumer_timeout_ms=timeout_ms)
    consumer = member(5000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(500)
    finally:
        consumer.close()
    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group)
    time.sleep(0.5)
    consumer = member(15000)
    try:
        assert next(iter(consumer)).value == b"hello"
    finally:
        consumer.close()


def test_create_and_delete_topics_without_the_right_are_refused_with_nothing_changed(secure):
    topic = name("nocreate")
    error = create_topic(secure, ALICE, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert not (secure.process.log_dir / f"{topic}-0").exists() and topic not in topic_names(secure, ADMIN)

    kept = made(secure, name("kept"))
    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", kept)
    wait_for(lambda: kept in topic_names(secure, ALICE), "alice's Describe", timeout_s=20)
    error = delete_topic(secure, ALICE, kept)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert (secure.process.log_dir / f"{kept}-0").exists() and kept in topic_names(secure, ADMIN)

    acls(secure, "--add", "--allow-principal", "User:alice", "--operation", "Create", "--topic", topic)
    wait_for(lambda: create_topic(secure, ALICE, topic) is None, "alice's Create on the topic", timeout_s=20)


def test_an_idempotent_producer_needs_idempotent_write_on_the_cluster(secure):
    topic = made(secure, name("idem"))
    acls(secure, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    wait_for(lambda: produce(secure, BOB, topic) is None, "bob's Write", timeout_s=20)
    before = log_bytes(secure, topic)
    # librdkafka's InitProducerId is refused with Kafka's 31, a fatal error for an idempotent producer
    refused = produce(secure, BOB, topic, b"idempotent", **{"enable.idempotence": True, "retries": 1})
    assert refused == "CLUSTER_AUTHORIZATION_FAILED" and log_bytes(secure, topic) == before
    acls(secure, "--add", "--allow-principal", "User:bob", "--operation", "IdempotentWrite", "--cluster")
    wait_for(lambda: produce(secure, BOB, topic, b"idempotent", **{"enable.idempotence": True, "retries": 1}) is None,
             "bob's IdempotentWrite", timeout_s=20)
    assert b"idempotent" in consume(secure, ADMIN, topic)


def test_the_certificate_principal_is_the_exact_dn_on_the_ssl_listener(secure):
    topic = made(secure, name("cert"))
    acls(secure, "--add", "--allow-principal", f"User:{CLIENT_SUBJECT}", "--operation", "Write", "--operation",
         "Read", "--topic", topic)
    wait_for(lambda: produce(secure, CAROL, topic, b"by certificate") is None, "carol's certificate ACL",
             timeout_s=20)
    assert consume(secure, CAROL, topic) == [b"by certificate"]
    # the same CN under another OU is another principal: refused, and the topic hidden from it
    assert produce(secure, CAROL_OPS, topic) == "TOPIC_AUTHORIZATION_FAILED"
    assert topic not in topic_names(secure, CAROL_OPS) and topic in topic_names(secure, CAROL)


def test_the_0_7_port_follows_the_acls_of_the_certificate_principal(secure):
    topic = name("old-tls")
    produce_0_7 = encode_0_7(ProduceRequest(topic, 0, encode_message_set([b"m1"])))
    with kafka07_tls_client(secure, CAROL) as client:  # no Write yet: closed, one WARNING
        client.send(produce_0_7)
        assert client.is_closed_by_peer()
    wait_for(lambda: f"produce to '{topic}' by User:{CLIENT_SUBJECT} refused" in secure.log_tail(200000),
             "the refusal's WARNING naming the certificate principal")
    acls(secure, "--add", "--allow-principal", f"User:{CLIENT_SUBJECT}", "--operation", "Write", "--operation",
         "Read", "--topic", topic)

    def produced_and_fetched(login: Login) -> bool:
        with kafka07_tls_client(secure, login) as client:
            client.send(produce_0_7)
            try:
                answer = client.request(encode_0_7(FetchRequest(topic, 0, 0, 4096)))
            except ConnectionError:  # the ACL not there yet: the produce closed the connection
                return False
        return answer[:2] == b"\x00\x00" and b"m1" in answer
    wait_for(lambda: produced_and_fetched(CAROL), "0.7 produce and fetch allowed for carol's DN", timeout_s=20)
    with kafka07_tls_client(secure, CAROL_OPS) as client:  # another DN: no Read (error 29), no Write (closed)
        assert client.request(encode_0_7(FetchRequest(topic, 0, 0, 4096))) == b"\x00\x1d"
        client.send(produce_0_7)
        assert client.is_closed_by_peer()
    assert f"produce to '{topic}' by User:{OTHER_SUBJECT} refused" in secure.log_tail(200000)
    with pytest.raises(OSError):  # ssl.client.auth=required: no certificate, no connection
        with kafka07_tls_client(secure) as client:
            client.request(encode_0_7(FetchRequest(topic, 0, 0, 4096)))
