"""tools/quotas.py's arguments: kafka-configs' spelling of entities and configs."""

from __future__ import annotations

import pytest

from twisted_broker.security.quota import DEFAULT
from twisted_broker.tools.errors import UsageError
from twisted_broker.tools.quotas import describe_line, entity_from, parse_add_config


@pytest.mark.parametrize(("types", "names", "entity"), [
    (["users"], ["alice"], ("alice", None)),
    (["users"], [DEFAULT], (DEFAULT, None)),
    (["clients"], ["app"], (None, "app")),
    (["users", "clients"], ["alice", "app"], ("alice", "app")),
    (["users", "clients"], [DEFAULT, DEFAULT], (DEFAULT, DEFAULT)),
    (["users"], None, None),
])
def test_entities_are_named_as_kafka_configs_names_them(types, names, entity):
    assert entity_from(types, names) == entity


@pytest.mark.parametrize(("types", "names"), [([], ["a"]), (["clients", "users"], ["a", "b"]),
                                              (["users"], ["a", "b"]), (["users", "clients"], ["a"]),
                                              (["users"], [""])])
def test_entities_that_do_not_fit_are_refused(types, names):
    with pytest.raises(UsageError):
        entity_from(types, names)


def test_add_config_takes_the_two_rates():
    assert parse_add_config("producer_byte_rate=1048576, consumer_byte_rate=2048") == {
        "producer_byte_rate": "1048576", "consumer_byte_rate": "2048"}


@pytest.mark.parametrize("text", ["", "producer_byte_rate", "request_percentage=5", "producer_byte_rate=0",
                                  "producer_byte_rate=-1", "producer_byte_rate=1.5"])
def test_add_config_refuses_anything_else(text):
    with pytest.raises(UsageError):
        parse_add_config(text)


def test_describe_lines_read_as_kafkas():
    assert describe_line(("alice", "app"), {"producer_byte_rate": "1024", "SCRAM-SHA-256": "secret"}) == (
        "Configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024")
