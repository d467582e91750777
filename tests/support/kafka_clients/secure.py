"""A broker with every kind of listener of today's clients (docs/security.md), its test CA and
certificates (trustme), SCRAM users, and each client library's configuration for a listener.

``start_secure`` starts one ``twistd -n broker`` with PLAINTEXT, SASL_PLAINTEXT, SASL_SSL and
SSL listeners on free loopback ports (SSL with ``ssl.client.auth=required``) and SCRAM users
made by ``twisted-broker users`` (the real command, against the broker's ZooKeeper chroot).
``Login`` is one way in: the listener, and the SASL mechanism and credentials or the client
certificate; each ``*_config`` function spells it in one library's keys.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.support.brokers import BrokerProcess, WireClient
from tests.support.cli import run_cli
from tests.support.kafka_clients.client_kafkajs import JS, TIMEOUT_S
from tests.support.kafka_clients.modern_cluster import LISTEN_TIMEOUT_S, free_port, wait_for_listener

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
USERS = {"alice": ("SCRAM-SHA-256", "alice-secret"), "bob": ("SCRAM-SHA-512", "bob-secret")}
CLIENT_SUBJECT = "CN=carol,OU=eng,O=corp"  # the client certificate's, RFC 2253 order
OTHER_SUBJECT = "CN=carol,OU=ops,O=corp"  # a second certificate of the same CA: one RDN differs


@dataclass(frozen=True)
class Login:
    listener: str
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    certificate: bool = False  # present the client certificate (SSL)
    other_certificate: bool = False  # present the second one (OTHER_SUBJECT) instead

    @property
    def tls(self) -> bool:
        return self.listener in ("SSL", "SASL_SSL")


@dataclass
class SecureBroker:
    process: BrokerProcess
    ports: dict[str, int]
    ca_file: Path
    client_cert: Path
    client_key: Path
    zk_connect: str
    other_cert: Path | None = None
    other_key: Path | None = None

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def log_tail(self, max_bytes: int = 6000) -> str:
        return self.process.log_tail(max_bytes)


def start_secure(directory: Path, zk_connect: str, *, extra: dict[str, str] | None = None,
                 extra_args: list[str] | None = None) -> SecureBroker:
    """The broker, its certificates and users; ``extra``: more properties, ``extra_args``: more
    ``twistd broker`` options (a debug port, the console)."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("carol.example", common_name="carol", organization_unit_name="eng",
                           organization_name="corp")
    other = ca.issue_cert("carol.example", common_name="carol", organization_unit_name="ops",
                          organization_name="corp")
    directory.mkdir(parents=True, exist_ok=True)
    files = {name: directory / name for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key",
                                                 "other.pem", "other.key")}
    ca.cert_pem.write_to_path(str(files["ca.pem"]))
    for name, issued in (("server", server), ("client", client), ("other", other)):
        issued.cert_chain_pems[0].write_to_path(str(files[f"{name}.pem"]))
        issued.private_key_pem.write_to_path(str(files[f"{name}.key"]))
    for user, (mechanism, password) in USERS.items():
        done = run_cli("users", "--zk", zk_connect, "--add", user, "--mechanism", mechanism, "--password", password)
        assert done.returncode == 0, done.stderr
    ports = {name: free_port() for name in LISTENERS}
    broker = BrokerProcess(directory / "broker", zk_connect=zk_connect, properties={
        "num.partitions": "1", "log.flush.interval": "1",
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": str(files["server.pem"]),
        "ssl.keystore.key": str(files["server.key"]), "ssl.truststore.certificates": str(files["ca.pem"]),
        "ssl.client.auth": "required", **(extra or {})}, extra_args=extra_args).start()
    if wait_for_listener(broker, ports["PLAINTEXT"]) is None:
        broker.kill()
        pytest.fail(f"the PLAINTEXT listener did not open within {LISTEN_TIMEOUT_S:.0f} s\n{broker.log_tail()}")
    return SecureBroker(broker, ports, files["ca.pem"], files["client.pem"], files["client.key"], zk_connect,
                        files["other.pem"], files["other.key"])


def logins(*listeners: str) -> list[Login]:
    """The successful ways in: each SASL mechanism on each SASL listener, and the certificate."""
    found = []
    for listener in listeners:
        if listener.startswith("SASL"):
            found += [Login(listener, "PLAIN", "alice", USERS["alice"][1]),
                      Login(listener, "SCRAM-SHA-256", "alice", USERS["alice"][1]),
                      Login(listener, "SCRAM-SHA-512", "bob", USERS["bob"][1])]
        elif listener == "SSL":
            found.append(Login("SSL", certificate=True))
    return found


# -- each library's spelling -------------------------------------------------------------------

def kafka_python_config(broker: SecureBroker, login: Login) -> dict:
    config = {"bootstrap_servers": broker.bootstrap(login.listener), "security_protocol": login.listener}
    if login.mechanism:
        config.update(sasl_mechanism=login.mechanism, sasl_plain_username=login.username,
                      sasl_plain_password=login.password)
    if login.tls:
        config["ssl_cafile"] = str(broker.ca_file)
    if login.certificate or login.other_certificate:
        cert, key = certificate_files(broker, login)
        config.update(ssl_certfile=str(cert), ssl_keyfile=str(key))
    return config


def certificate_files(broker: SecureBroker, login: Login) -> tuple[Path, Path]:
    """The client certificate and key ``login`` presents."""
    return (broker.other_cert, broker.other_key) if login.other_certificate else (broker.client_cert, broker.client_key)


def kafka07_tls_client(broker: SecureBroker, login: Login | None = None, timeout_s: float = 10.0) -> WireClient:
    """A 0.7 WireClient over TLS to the broker's 0.7 port (security.inter.broker.protocol=SSL),
    showing ``login``'s client certificate (none without one)."""
    context = ssl.create_default_context(cafile=str(broker.ca_file))
    if login is not None and (login.certificate or login.other_certificate):
        cert, key = certificate_files(broker, login)
        context.load_cert_chain(str(cert), str(key))
    client = WireClient(("127.0.0.1", broker.process.port), timeout_s)
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


def aiokafka_config(broker: SecureBroker, login: Login) -> dict:
    from aiokafka.helpers import create_ssl_context
    config = {"bootstrap_servers": broker.bootstrap(login.listener), "security_protocol": login.listener}
    if login.mechanism:
        config.update(sasl_mechanism=login.mechanism, sasl_plain_username=login.username,
                      sasl_plain_password=login.password)
    if login.tls:
        config["ssl_context"] = create_ssl_context(
            cafile=str(broker.ca_file), certfile=str(broker.client_cert) if login.certificate else None,
            keyfile=str(broker.client_key) if login.certificate else None)
    return config


def librdkafka_config(broker: SecureBroker, login: Login) -> dict[str, str]:
    """confluent-kafka's keys, which are kcat's ``-X`` keys too."""
    config = {"bootstrap.servers": broker.bootstrap(login.listener), "security.protocol": login.listener.lower()}
    if login.mechanism:
        config.update({"sasl.mechanisms": login.mechanism, "sasl.username": login.username,
                       "sasl.password": login.password})
    if login.tls:
        config["ssl.ca.location"] = str(broker.ca_file)
    if login.certificate or login.other_certificate:
        cert, key = certificate_files(broker, login)
        config.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    return config


def kafkajs_security(broker: SecureBroker, login: Login) -> dict:
    """js/client.js's KAFKAJS_SECURITY: its ``ssl`` (file paths) and ``sasl`` options."""
    security: dict = {}
    if login.tls:
        security["ssl"] = {"ca": str(broker.ca_file)}
        if login.certificate:
            security["ssl"].update(cert=str(broker.client_cert), key=str(broker.client_key))
    if login.mechanism:
        security["sasl"] = {"mechanism": login.mechanism.lower(), "username": login.username,
                            "password": login.password}
    return security


def kafkajs(broker: SecureBroker, login: Login, *args: object, stdin: object = None) -> subprocess.CompletedProcess:
    """``node client.js ARGS`` (its first argument after the mode is the bootstrap) as ``login``."""
    mode, *rest = args
    return subprocess.run(["node", "client.js", mode, broker.bootstrap(login.listener), *map(str, rest)], cwd=JS,
                          capture_output=True, text=True, timeout=TIMEOUT_S,
                          input=None if stdin is None else json.dumps(stdin),
                          env={**os.environ, "KAFKAJS_SECURITY": json.dumps(kafkajs_security(broker, login))})
