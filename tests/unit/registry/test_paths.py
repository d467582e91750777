"""Kafka 0.7's ZooKeeper paths and node values (spec 5.1-5.2), as registry/paths.py builds them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.registry import paths
from twisted_broker.registry.paths import BrokerInfo

# Hosts as 0.7 readers can parse them: split on ":" takes fields 1 and 2, so no ":" in a host.
hosts = st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), min_size=1)


def test_spec_v10_broker_value_decodes_to_its_host_and_port():
    info = BrokerInfo.decode(0, b"10.0.0.5-1354094518123:10.0.0.5:9092")
    assert info == BrokerInfo(0, "10.0.0.5-1354094518123", "10.0.0.5", 9092)


def test_broker_value_encodes_as_creator_id_host_and_port_in_utf8():
    info = BrokerInfo(7, paths.creator_id("10.0.0.5", 1354094518123), "10.0.0.5", 9092)
    assert info.encode() == b"10.0.0.5-1354094518123:10.0.0.5:9092"


def test_creator_id_is_host_dash_startup_ms():
    assert paths.creator_id("broker-a.example", 1354094518123) == "broker-a.example-1354094518123"


@given(broker_id=st.integers(0, 2**31 - 1), host=hosts,
       startup_ms=st.integers(0, 2**63 - 1), port=st.integers(0, 65535))
def test_broker_value_round_trips(broker_id, host, startup_ms, port):
    info = BrokerInfo(broker_id, paths.creator_id(host, startup_ms), host, port)
    assert BrokerInfo.decode(broker_id, info.encode()) == info


def test_non_ascii_host_is_raw_utf8_bytes():
    info = BrokerInfo(1, "hôte-1", "hôte", 9092)
    assert info.encode() == "hôte-1:hôte:9092".encode("utf-8")
    assert BrokerInfo.decode(1, info.encode()).host == "hôte"


@pytest.mark.parametrize("value", [
    b"",
    b"10.0.0.5:9092",                            # no creator id: 0.7.0's design-page form
    b"10.0.0.5-1354094518123:10.0.0.5",          # no port
    b"10.0.0.5-1354094518123:10.0.0.5:",         # empty port
    b"10.0.0.5-1354094518123:10.0.0.5:90x2",     # port not decimal
    b"10.0.0.5-1354094518123:10.0.0.5:-1",       # negative port
    b"10.0.0.5-1354094518123:::1:9092",          # IPv6 literal: readers would misparse it
    b'{"host": "10.0.0.5", "port": 9092}',       # the connector comment's JSON: wrong
    b"\xff\xfe:host:9092",                       # not UTF-8
])
def test_malformed_broker_value_raises_value_error(value):
    with pytest.raises(ValueError):
        BrokerInfo.decode(3, value)


def test_malformed_broker_value_error_names_the_broker():
    with pytest.raises(ValueError, match="broker 3 "):
        BrokerInfo.decode(3, b"10.0.0.5:9092")


def test_path_builders_follow_the_spec_table():
    assert paths.BROKER_IDS == "/brokers/ids"
    assert paths.BROKER_TOPICS == "/brokers/topics"
    assert paths.CONSUMERS == "/consumers"
    assert paths.broker_id_path(10) == "/brokers/ids/10"
    assert paths.topic_path("my-topic") == "/brokers/topics/my-topic"
    assert paths.broker_topic_path("my-topic", 10) == "/brokers/topics/my-topic/10"


def test_partition_count_is_decimal_text():
    assert paths.encode_partition_count(4) == b"4"
    assert paths.encode_partition_count(12) == b"12"
    assert paths.decode_partition_count(b"4") == 4
    assert paths.decode_partition_count(b"12") == 12


@given(st.integers(1, 2**31 - 1))
def test_partition_count_round_trips(count):
    assert paths.decode_partition_count(paths.encode_partition_count(count)) == count


@pytest.mark.parametrize("value", [b"", b"four", b"4.0", b"\xff"])
def test_malformed_partition_count_raises_value_error(value):
    with pytest.raises(ValueError):
        paths.decode_partition_count(value)


@pytest.mark.parametrize("name, valid", [
    ("group-1.x", True), ("é", True), ("", False), (".", False), ("..", False), ("a/b", False),
    ("a\x00", False), ("a\x1f", False), ("\x7f", False), ("\ud800", False), ("\ufff0", False),
])
def test_node_names_zookeeper_refuses_are_told_apart(name, valid):
    assert paths.is_valid_node_name(name) is valid


def test_commit_metadata_lives_beside_the_offsets_not_among_them():
    assert paths.offset_metadata_path("g", "t", "0-1") == "/consumers/g/offsets_metadata/t/0-1"
    assert not paths.offset_metadata_path("g", "t", "0-1").startswith(paths.offsets_path("g", "t") + "/")
