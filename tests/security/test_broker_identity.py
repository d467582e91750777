"""Brokers' own identity for replication (docs/security.md, "Brokers' own identity"): three real
brokers with the authorizer on and ``security.inter.broker.protocol=SSL``: the 0.7 port is TLS
with required client certificates, each broker's followers show that broker's own certificate
(its ``ssl.keystore.*``), and only the brokers' principals may fetch as replicas: two through
``super.users``, the third through a ClusterAction ACL. A client with another certificate that
sends a ReplicaFetch is refused (closed, one WARNING naming its principal).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from twisted_broker import cli
from twisted_broker.codec.kafka07.replication import REPLICA_FETCH, ReplicaFetchPartition, ReplicaFetchRequest
from twisted_broker.codec.kafka07.requests import encode_request
from tests.support.brokers import BrokerProcess
from tests.support.polling import wait_for
from tests.support.replicated_cluster import FAST, Wire, segment_bytes
from tests.support.zookeeper import new_chroot

OU = "OU=brokers,O=corp"


def subject(name: str) -> str:
    return f"CN={name},{OU}"


class TlsCluster:
    """Three brokers, each with a certificate of its own (CN=broker-N), and a CA's client files."""

    def __init__(self, root: Path, zk_connect: str) -> None:
        self.root, self.zk_connect, self.ca = root, zk_connect, trustme.CA()
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.brokers: dict[int, BrokerProcess] = {}

    def certificate(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) files for CN=name: valid for 127.0.0.1 too (a broker's is its server's)."""
        issued = self.ca.issue_cert("127.0.0.1", "localhost", common_name=name, organization_unit_name="brokers",
                                    organization_name="corp")
        cert, key = self.root / f"{name}.pem", self.root / f"{name}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        return cert, key

    def start(self, broker_id: int, super_users: str) -> BrokerProcess:
        cert, key = self.certificate(f"broker-{broker_id}")
        self.brokers[broker_id] = BrokerProcess(self.root / f"broker-{broker_id}", broker_id=broker_id,
                                                zk_connect=self.zk_connect, properties={
            **FAST, "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": super_users,
            "security.inter.broker.protocol": "SSL", "ssl.client.auth": "required",
            "ssl.keystore.certificate.chain": str(cert), "ssl.keystore.key": str(key),
            "ssl.truststore.certificates": str(self.ca_file)}).start()
        return self.brokers[broker_id]

    def wire(self, broker: BrokerProcess, client: tuple[Path, Path]) -> Wire:
        """A 0.7 connection over TLS to ``broker``, showing the ``client`` certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(*map(str, client))
        wire = Wire(broker)
        wire.sock = context.wrap_socket(wire.sock, server_hostname="127.0.0.1")
        return wire

    def stop_all(self) -> None:
        for broker in self.brokers.values():
            broker.kill()


@pytest.fixture
def cluster(zookeeper, tmp_path):
    cluster = TlsCluster(tmp_path, new_chroot(zookeeper))
    yield cluster
    cluster.stop_all()


def test_brokers_replicate_as_their_certificates_and_nobody_else_fetches_as_a_replica(cluster):
    # broker-2 may follow through an ACL; brokers 0 and 1 and the operator are super users.
    assert cli.main(["acls", "--zk", cluster.zk_connect, "--add", "--allow-principal",
                     f"User:{subject('broker-2')}", "--operation", "ClusterAction", "--cluster"]) == 0
    super_users = ";".join(f"User:{subject(name)}" for name in ("broker-0", "broker-1", "operator"))
    brokers = [cluster.start(i, super_users) for i in range(3)]
    operator, intruder = cluster.certificate("operator"), cluster.certificate("intruder")

    def settled():  # every broker: the topic's every partition led, every replica in sync
        answers = []
        for broker in brokers:
            with cluster.wire(broker, operator) as wire:
                [answer] = wire.metadata("secured").topics
            if answer.error or not answer.partitions or any(
                    p.leader < 0 or len(p.replicas) != 3 or set(p.isr) != set(p.replicas) for p in answer.partitions):
                return None
            answers.append(answer)
        return answers[0]
    topic = wait_for(settled, "'secured' on three brokers, all replicas in sync", timeout_s=40)

    leader = cluster.brokers[topic.partitions[0].leader]
    with cluster.wire(leader, operator) as wire:
        assert wire.produce("secured", 0, [b"one", b"two", b"three"], acks=-1) == (0, 0)  # acks=all: followed
    wait_for(lambda: len({segment_bytes(b, "secured", 0) for b in brokers}) == 1
             and segment_bytes(leader, "secured", 0), "the three replicas' segments byte-identical", timeout_s=20)

    fetch = encode_request(ReplicaFetchRequest(7, 0, 0, (ReplicaFetchPartition("secured", 0, 0, 0, 4096, 0),)),
                           REPLICA_FETCH)
    with cluster.wire(leader, intruder) as wire:  # a valid certificate, not a broker's
        wire.send(fetch)
        assert wire.is_closed_by_peer()
    wait_for(lambda: f"a replica's fetch by User:{subject('intruder')} refused" in leader.log_tail(200000),
             "the WARNING naming the intruder's principal")
    assert not any("a replica's fetch by User:CN=broker" in b.log_tail(500000) for b in brokers)
