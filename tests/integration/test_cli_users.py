"""``twisted-broker users`` against a real ZooKeeper: the znode is Kafka's, the password is
never stored, other keys of the user's config survive, list and delete do what they say."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from tests.support.cli import assert_one_line_error, run_cli
from tests.support.zookeeper import new_chroot
from twisted_broker.security.scram import ScramCredential, password_matches

CREDENTIAL_KEYS = ["salt", "stored_key", "server_key", "iterations"]


@pytest.fixture
def zk(zookeeper):
    connect = new_chroot(zookeeper)
    client = KazooClient(hosts=connect)
    client.start(30)
    yield connect, client
    client.stop()
    client.close()


def users(connect: str, *args: str):
    return run_cli("users", "--zk", connect, *args)


def test_add_writes_kafkas_znode_with_a_credential_and_no_password(zk, tmp_path):
    connect, client = zk
    assert users(connect, "--add", "alice", "--mechanism", "SCRAM-SHA-256", "--password", "s3cret").returncode == 0
    password_file = tmp_path / "pw"
    password_file.write_text("other-secret\n")
    done = users(connect, "--add", "alice", "--mechanism", "SCRAM-SHA-512", "--password-file", password_file)
    assert done.returncode == 0, done.stderr
    value, _stat = client.get("/config/users/alice")
    assert b"s3cret" not in value and b"other-secret" not in value
    node = json.loads(value)
    assert node["version"] == 1 and sorted(node["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for mechanism, password in [("SCRAM-SHA-256", b"s3cret"), ("SCRAM-SHA-512", b"other-secret")]:
        text = node["config"][mechanism]
        assert [item.split("=", 1)[0] for item in text.split(",")] == CREDENTIAL_KEYS
        credential = ScramCredential.from_text(text)
        assert credential.iterations == 4096 and password_matches(mechanism, credential, password)
    # Kafka's change notification, so Kafka's own brokers would notice
    changes = client.get_children("/config/changes")
    assert len(changes) == 2 and all(name.startswith("config_change_") for name in changes)
    assert json.loads(client.get(f"/config/changes/{changes[0]}")[0]) == {"version": 2, "entity_path": "users/alice"}


def test_list_and_delete_keep_the_users_other_keys(zk):
    connect, client = zk
    client.create("/config/users/bob", json.dumps(
        {"version": 1, "config": {"producer_byte_rate": "1048576"}}).encode(), makepath=True)
    assert users(connect, "--add", "bob", "--mechanism", "SCRAM-SHA-512", "--password", "pw").returncode == 0
    assert users(connect, "--add", "a b", "--mechanism", "SCRAM-SHA-256", "--password", "pw").returncode == 0
    assert client.exists("/config/users/a%20b") is not None  # Kafka's Sanitizer
    listing = users(connect, "--list").stdout.decode().splitlines()
    assert [line.split() for line in listing] == [["USER", "MECHANISMS"], ["a", "b", "SCRAM-SHA-256"],
                                                  ["bob", "SCRAM-SHA-512"]]
    assert json.loads(client.get("/config/users/bob")[0])["config"]["producer_byte_rate"] == "1048576"
    assert users(connect, "--delete", "bob").returncode == 0
    assert json.loads(client.get("/config/users/bob")[0]) == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
    assert users(connect, "--list").stdout.decode().splitlines()[-1].split() == ["bob", "-"]


def test_bad_arguments_are_one_line_errors(zk):
    connect, _client = zk
    assert_one_line_error(users(connect, "--add", "x", "--password", "pw"), 2, "--mechanism")
    assert_one_line_error(users(connect, "--add", "x", "--mechanism", "SCRAM-SHA-256"), 2, "--password")
    assert_one_line_error(users(connect, "--add", "x", "--mechanism", "SCRAM-SHA-256", "--password", "p",
                                "--iterations", "100"), 2, "iterations")
    assert_one_line_error(users(connect, "--delete", "nobody"), 1, "no user nobody")
