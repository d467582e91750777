"""registry/quota_config.py: Kafka's quota entity paths, values and change notifications."""

from __future__ import annotations

import json

import pytest

from twisted_broker.registry.quota_config import (
    config_change_sequence, decode_entity_change, entity_of, entity_path, quota_values,
)
from twisted_broker.registry.user_config import decode_user_config, encode_entity_change, encode_user_config
from twisted_broker.security.quota import DEFAULT

PATHS = [(("alice", None), "users/alice"),
         (("alice", "app"), "users/alice/clients/app"),
         ((DEFAULT, None), "users/<default>"),
         ((DEFAULT, DEFAULT), "users/<default>/clients/<default>"),
         (("alice", DEFAULT), "users/alice/clients/<default>"),
         ((None, "app"), "clients/app"),
         ((None, DEFAULT), "clients/<default>"),
         # Kafka's Sanitizer: URL-encoding, "*" as %2A; a real "<default>" name is encoded
         (("CN=carol,O=corp", None), "users/CN%3Dcarol%2CO%3Dcorp"),
         ((None, "my client*"), "clients/my%20client%2A"),
         (("<default>x", None), "users/%3Cdefault%3Ex")]


@pytest.mark.parametrize(("entity", "path"), PATHS)
def test_entity_paths_are_kafkas_and_read_back(entity, path):
    assert entity_path(entity) == path
    assert entity_of(path) == entity


@pytest.mark.parametrize("path", ["topics/t", "brokers/1", "users/", "users/a/clients", "users/a/x/b", "clients"])
def test_paths_of_other_entities_are_not_quota_entities(path):
    with pytest.raises(ValueError):
        entity_of(path)


def test_the_node_value_is_kafka_configs_json():
    # What kafka-configs --alter --add-config 'producer_byte_rate=1024' --entity-type users writes
    # (ConfigEntityZNode: version 1, values as strings, SCRAM credentials alongside).
    kafka = b'{"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-256":"salt=a,stored_key=b,server_key=c,iterations=4096"}}'
    config = decode_user_config(kafka)
    assert quota_values("users/alice", config) == {"producer_byte_rate": 1024.0}
    assert encode_user_config(config) == kafka


def test_the_change_notification_is_kafkas():
    value = encode_entity_change("users/alice/clients/app")
    assert json.loads(value) == {"version": 2, "entity_path": "users/alice/clients/app"}
    assert value == b'{"version":2,"entity_path":"users/alice/clients/app"}'
    assert decode_entity_change(value) == "users/alice/clients/app"
    assert config_change_sequence("config_change_0000000042") == 42
    assert config_change_sequence("other") == -1


def test_a_bad_quota_value_is_left_out_with_a_warning(caplog):
    assert quota_values("clients/app", {"producer_byte_rate": "fast", "consumer_byte_rate": "2048"}) == {
        "consumer_byte_rate": 2048.0}
    assert "producer_byte_rate of clients/app" in caplog.text


@pytest.mark.parametrize("value", [b"nope", b'{"version":1,"entity_path":"users/a"}', b'{"version":2}'])
def test_a_bad_notification_is_refused(value):
    with pytest.raises(ValueError):
        decode_entity_change(value)
