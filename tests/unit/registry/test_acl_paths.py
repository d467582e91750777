"""The ACLs' ZooKeeper layout: Kafka's paths and JSON, byte for byte."""

from __future__ import annotations

import json

import pytest

from twisted_broker.registry import acl_paths
from twisted_broker.security.acl import AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType

ALICE_READ = AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW)


def test_paths_are_kafkas():
    assert acl_paths.acl_path(ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)) == "/kafka-acl/Topic/t"
    assert acl_paths.acl_path(ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/Group/g-"
    assert acl_paths.acl_path(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)) == \
        "/kafka-acl/Cluster/kafka-cluster"
    assert acl_paths.acl_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "x", PatternType.LITERAL)) == \
        "/kafka-acl/TransactionalId/x"


def test_acl_node_value_is_kafkas_json():
    data = acl_paths.encode_acls([ALICE_READ, AclEntry("User:bob", "10.0.0.1", Operation.IDEMPOTENT_WRITE,
                                                       Permission.DENY)])
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite", "host": "10.0.0.1"}]}
    assert acl_paths.decode_acls(data) == {ALICE_READ, AclEntry("User:bob", "10.0.0.1", Operation.IDEMPOTENT_WRITE,
                                                                Permission.DENY)}


def test_decodes_what_kafka_writes():
    kafka = (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
             b'"operation":"ClusterAction","host":"*"}]}')
    assert acl_paths.decode_acls(kafka) == {AclEntry("User:alice", "*", Operation.CLUSTER_ACTION, Permission.ALLOW)}
    assert acl_paths.decode_acls(b"") == frozenset()
    with pytest.raises(ValueError):
        acl_paths.decode_acls(b'{"version":1,"acls":[{"principal":"User:a"}]}')


def test_change_notifications():
    literal = ResourcePattern(ResourceType.TOPIC, "a:b", PatternType.LITERAL)
    prefixed = ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED)
    assert acl_paths.change_path(literal) == "/kafka-acl-changes/acl_changes_"
    assert acl_paths.change_path(prefixed) == "/kafka-acl-extended-changes/acl_changes_"
    assert acl_paths.encode_change(literal) == b"TOPIC:a:b"
    assert json.loads(acl_paths.encode_change(prefixed)) == {
        "version": 1, "resourceType": "GROUP", "name": "g-", "patternType": "PREFIXED"}
    assert acl_paths.decode_change(acl_paths.LITERAL_CHANGES, b"TOPIC:a:b") == literal
    assert acl_paths.decode_change(acl_paths.LITERAL_CHANGES, b"Topic:a:b") == literal  # Kafka 1.x's spelling
    assert acl_paths.decode_change(acl_paths.EXTENDED_CHANGES, acl_paths.encode_change(prefixed)) == prefixed
    assert acl_paths.change_sequence("acl_changes_0000000012") == 12
    assert acl_paths.change_sequence("other") == -1
