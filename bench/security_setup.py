"""The set-up of bench/security.py: its ACLs, SCRAM users, certificates and broker processes
with the three listeners of today's clients (that module's docstring says what it measures)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.broker_process import BrokerProcess
from bench.peers.tbroker import BROKER_SETTINGS
from twisted_broker.local_zookeeper import free_port
from twisted_broker.security.acl import AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISM = "SCRAM-SHA-256"
USERS = {"bench": "bench-secret", "admin": "admin-secret", "intruder": "intruder-secret"}
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ACLS = 1_000
TIMEOUT_S = 120.0
B1_TOPIC = "bench-b1"  # the topic of the produce b1 row


# -- the ACLs ----------------------------------------------------------------------------------

def thousand_acls(principal: str, topic: str) -> dict[ResourcePattern, set[AclEntry]]:
    """``principal``'s Write on ``topic`` and 999 others: 9 Reads of ``topic`` by other users
    and a Deny of everything under a prefix covering it for another user (so a decision for
    ``topic`` looks at three patterns: the literal one, and the prefix; the wildcard is empty),
    240 prefixed patterns of other teams, 600 literal topics and 149 groups of other users."""
    def entry(who: str, operation: Operation, permission: Permission = Permission.ALLOW) -> AclEntry:
        return AclEntry(who, "*", operation, permission)

    def literal(resource_type: ResourceType, name: str) -> ResourcePattern:
        return ResourcePattern(resource_type, name, PatternType.LITERAL)

    acls: dict[ResourcePattern, set[AclEntry]] = {
        literal(ResourceType.TOPIC, topic): {entry(principal, Operation.WRITE)}
        | {entry(f"User:reader-{i}", Operation.READ) for i in range(9)},
        ResourcePattern(ResourceType.TOPIC, topic.split("-")[0] + "-", PatternType.PREFIXED):
            {entry("User:mallory", Operation.ALL, Permission.DENY)},
    }
    acls.update({ResourcePattern(ResourceType.TOPIC, f"team-{i}-", PatternType.PREFIXED):
                 {entry(f"User:team-{i}", Operation.WRITE)} for i in range(240)})
    acls.update({literal(ResourceType.TOPIC, f"other-{i}"): {entry(f"User:user-{i}", Operation.READ)}
                 for i in range(600)})
    acls.update({literal(ResourceType.GROUP, f"group-{i}"): {entry(f"User:user-{i}", Operation.READ)}
                 for i in range(149)})
    assert sum(map(len, acls.values())) == ACLS
    return acls


def write_acls(zk_connect: str, acls: dict[ResourcePattern, set[AclEntry]]) -> None:
    """Each pattern's entries added in ZooKeeper as ``twisted-broker acls --add`` adds them."""
    from twisted_broker.registry.acl_view import AclView  # loads kazoo: only when run
    with AclView(zk_connect) as view:
        for pattern, entries in acls.items():
            view.update(pattern, lambda current, entries=entries: current | entries)


# -- the set-up --------------------------------------------------------------------------------

def add_users(zk_connect: str) -> None:
    for user, password in USERS.items():
        done = subprocess.run([sys.executable, "-m", "twisted_broker", "users", "--zk", zk_connect, "--add", user,
                               "--mechanism", MECHANISM, "--password", password],
                              capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise RuntimeError(f"twisted-broker users --add {user}: {done.stderr.strip()}")


def make_certificates(directory: Path) -> dict[str, Path]:
    """A trustme CA and the brokers' certificate for 127.0.0.1: {ca, cert, key} paths."""
    import trustme
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": directory / "ca.pem", "cert": directory / "broker.pem", "key": directory / "broker.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    return files


class SecureBroker:
    """One ``twistd -n broker`` with LISTENERS on free loopback ports, in ``zk_connect``."""

    def __init__(self, directory: Path, zk_connect: str, certificates: dict[str, Path],
                 extra: dict[str, str] | None = None) -> None:
        directory.mkdir(parents=True)
        self.ca_file = certificates["ca"]
        self.ports = {name: free_port() for name in LISTENERS}
        self.process = BrokerProcess(str(directory), {
            **BROKER_SETTINGS, "enable.zookeeper": "true", "zk.connect": zk_connect,
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items()),
            "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": str(certificates["cert"]),
            "ssl.keystore.key": str(certificates["key"]), **(extra or {})})

    def start(self) -> None:
        self.process.start()
        deadline = time.monotonic() + TIMEOUT_S
        for port in self.ports.values():  # the listeners open once ZooKeeper has been read
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if self.process.process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"listener on {port} not open\n{self.process.log_tail()}") from None
                    time.sleep(0.1)

    def stop(self) -> None:
        self.process.stop()

    @property
    def pid(self) -> int:
        return self.process.process.pid

    def config(self, listener: str, user: str | None = None) -> dict[str, str]:
        """confluent-kafka's keys for ``listener`` (and ``user``'s SCRAM login on SASL ones)."""
        config = {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}", "security.protocol": listener.lower()}
        if listener.startswith("SASL"):
            config.update({"sasl.mechanisms": MECHANISM, "sasl.username": user, "sasl.password": USERS[user]})
        if listener.endswith("SSL"):
            config["ssl.ca.location"] = str(self.ca_file)
        return config


def create_topics(broker: SecureBroker, topics: list[str]) -> None:
    """One partition each, made by ``admin``; returns once each has a leader."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(broker.config("SASL_PLAINTEXT", "admin"))
    for topic, future in admin.create_topics([NewTopic(topic, 1, 1) for topic in topics]).items():
        future.result(TIMEOUT_S)
    client = Producer(broker.config("SASL_PLAINTEXT", "admin"))
    for topic in topics:
        wait_for_leader(client, topic)


def wait_for_leader(client, topic: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        metadata = client.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        if metadata.error is None and 0 in metadata.partitions and metadata.partitions[0].leader >= 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: no leader within {TIMEOUT_S:.0f} s ({metadata.error})")
        time.sleep(0.1)


def check_authorizer(broker: SecureBroker) -> None:
    """The broker "on" holds the 1,000 ACLs and refuses a user they do not name (else RuntimeError)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, AdminClient
    from confluent_kafka.admin import ResourcePatternType, ResourceType as AdminResourceType
    admin = AdminClient(broker.config("SASL_PLAINTEXT", "admin"))
    any_acl = AclBindingFilter(AdminResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + TIMEOUT_S
    while (held := len(admin.describe_acls(any_acl).result(TIMEOUT_S))) != ACLS:
        if time.monotonic() > deadline:  # the listeners open before ZooKeeper's ACLs are read
            raise RuntimeError(f"the authorizer holds {held} ACLs, not {ACLS}")
        time.sleep(0.2)
    errors = []
    producer = Producer({**broker.config("SASL_PLAINTEXT", "intruder"), "message.timeout.ms": 5000, "retries": 0})
    producer.produce(B1_TOPIC, b"x", partition=0, on_delivery=lambda error, _message: errors.append(error))
    producer.flush(30)
    if not errors or errors[0] is None or errors[0].name() != "TOPIC_AUTHORIZATION_FAILED":
        raise RuntimeError(f"the intruder's produce was not refused: {errors}")


# -- the clients -------------------------------------------------------------------------------
