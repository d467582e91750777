"""KafkaModernProtocol on a StringTransport, over a real ModernBroker and LogManager in tmp_path.

The requests are golden bytes annotated field by field; kafka-python's own protocol classes
decode some answers, as a codec independent of ours.
"""

from __future__ import annotations

import logging
import struct

import pytest
from twisted.internet.task import Clock

from tests.support.string_peer import Peer
from twisted_broker.config import BrokerConfig
from twisted_broker.coordinator.group.offset_store import FileOffsets
from twisted_broker.coordinator.producer.producer_ids import FileProducerIds
from twisted_broker.codec.kafka.api_keys import SUPPORTED
from twisted_broker.network.connection import RefusedRequest
from twisted_broker.network.kafka import KafkaModernFactory, decode_frame
from twisted_broker.handlers.kafka.table import modern_broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.log_manager import LogManager

API_VERSIONS_V0 = (b"\x00\x00\x00\x0e"             # size: 14 bytes follow
                   b"\x00\x12"                     # api key: 18, ApiVersions
                   b"\x00\x00"                     # api version: 0
                   b"\x00\x00\x00\x07"             # correlation id: 7
                   b"\x00\x04" b"test")            # client id: "test"; the body is empty

API_VERSIONS_V3 = (b"\x00\x00\x00\x1b"             # size: 27 bytes follow
                   b"\x00\x12"                     # api key: 18, ApiVersions
                   b"\x00\x03"                     # api version: 3 (flexible: librdkafka, kcat)
                   b"\x00\x00\x00\x2a"             # correlation id: 42
                   b"\x00\x04" b"kcat"             # client id: "kcat"
                   b"\x00"                         # header tagged fields: none
                   b"\x07" b"kcat-x"               # client software name (compact string)
                   b"\x04" b"1.7"                  # client software version
                   b"\x00")                        # body tagged fields: none

METADATA_V1_ALL = (b"\x00\x00\x00\x0e"             # size: 14 bytes follow
                   b"\x00\x03"                     # api key: 3, Metadata
                   b"\x00\x01"                     # api version: 1
                   b"\x00\x00\x00\x09"             # correlation id: 9
                   b"\xff\xff"                     # client id: null
                   b"\xff\xff\xff\xff")            # topics: null, every topic


@pytest.fixture
def factory(tmp_path):
    config = BrokerConfig(brokerid=3, log_dir=str(tmp_path / "logs"), enable_zookeeper=False, num_partitions=2,
                          hostname="broker.example")
    logs = LogManager(config.log_dir, now=lambda: 1000.0, partitions_for=config.partitions_for)
    logs.open()
    clock = Clock()
    broker = modern_broker(config, logs, BrokerStats(RequestStats(60, clock.seconds)), port=lambda: 9094,
                           clock=clock, offsets=FileOffsets(config.log_dir),
                           producer_ids=FileProducerIds(config.log_dir, config.brokerid))
    yield KafkaModernFactory(broker, max_request_size=1024 * 1024)
    logs.close()


def decode_api_versions_v0(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    correlation_id, error, count = struct.unpack_from(">ihi", frame)
    versions = dict((key, (low, high)) for key, low, high in struct.iter_unpack(">hhh", frame[10:]))
    assert len(versions) == count
    return correlation_id, error, versions


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_api_versions_v0_lists_the_served_versions(factory, byte_by_byte):
    peer = Peer(factory)
    peer.send(API_VERSIONS_V0, byte_by_byte)
    [frame] = peer.responses()
    correlation_id, error, versions = decode_api_versions_v0(frame)
    assert (correlation_id, error) == (7, 0)
    assert versions[18] == (0, 2) and versions[3] == (0, 7)
    assert all(SUPPORTED[key] == span for key, span in versions.items())


def test_api_versions_v3_gets_error_35_in_the_v0_layout_and_the_connection_stays_usable(factory):
    peer = Peer(factory)
    peer.send(API_VERSIONS_V3 + API_VERSIONS_V0)  # the client falls back at once
    unsupported, answered = peer.responses()
    correlation_id, error, versions = decode_api_versions_v0(unsupported)
    assert (correlation_id, error) == (42, 35)
    assert versions[18] == (0, 2)
    assert decode_api_versions_v0(answered)[:2] == (7, 0)
    assert peer.transport.connected and not peer.transport.disconnecting


def test_metadata_names_this_broker_at_its_listener_and_as_controller(factory):
    from kafka.protocol.metadata import MetadataResponse

    peer = Peer(factory)
    peer.send(METADATA_V1_ALL)
    [frame] = peer.responses()
    assert frame[:4] == b"\x00\x00\x00\x09"
    answer = MetadataResponse[1].decode(frame[4:])
    assert [tuple(b) for b in answer.brokers] == [(3, "broker.example", 9094, None)]
    assert answer.controller_id == 3
    assert answer.topics == []


def test_metadata_for_an_unknown_topic_creates_it_with_num_partitions(factory):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    peer = Peer(factory)
    body = MetadataRequest[4](topics=["fresh"], allow_auto_topic_creation=True).encode()
    peer.send(struct.pack(">ihhih", 10 + len(body), 3, 4, 11, -1) + body)
    [frame] = peer.responses()
    [topic] = MetadataResponse[4].decode(frame[4:]).topics
    error, name, internal, partitions = topic
    assert (error, name) == (0, "fresh")
    assert [(p[1], p[2], p[3], p[4]) for p in partitions] == [(0, 3, [3], [3]), (1, 3, [3], [3])]


BAD_FRAMES = {
    "unknown api key": b"\x00\x00\x00\x0a" b"\x00\x63" b"\x00\x00" b"\x00\x00\x00\x01" b"\xff\xff",
    "unserved version": b"\x00\x00\x00\x0e" b"\x00\x03" b"\x00\x09" b"\x00\x00\x00\x01" b"\xff\xff"
                        b"\xff\xff\xff\xff",
    "truncated body": b"\x00\x00\x00\x0c" b"\x00\x03" b"\x00\x01" b"\x00\x00\x00\x01" b"\xff\xff" b"\x00\x00",
    "trailing bytes": b"\x00\x00\x00\x0f" b"\x00\x03" b"\x00\x01" b"\x00\x00\x00\x01" b"\xff\xff"
                      b"\xff\xff\xff\xff" b"!",
    "bad utf-8 client id": b"\x00\x00\x00\x0c" b"\x00\x12" b"\x00\x00" b"\x00\x00\x00\x01" b"\x00\x02\xff\xfe",
    "negative size": b"\xff\xff\xff\xf0",
    "huge size": b"\x7f\xff\xff\xff",
    "too short for a header": b"\x00\x00\x00\x03" b"\x00\x12\x00",
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_a_bad_frame_closes_its_connection_with_one_warning_and_others_are_served(factory, caplog, name):
    bad, good = Peer(factory), Peer(factory)
    with caplog.at_level(logging.WARNING):
        bad.send(API_VERSIONS_V0 + BAD_FRAMES[name])
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "10.1.2.3:5555" in warnings[0].getMessage()
    assert bad.transport.disconnecting
    assert len(bad.responses()) == 1  # what came before the bad frame was answered
    good.send(API_VERSIONS_V0)
    assert decode_api_versions_v0(good.responses()[0])[:2] == (7, 0)


def test_metadata_for_invalid_topic_names_answers_error_17_and_creates_nothing(factory, tmp_path):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    peer = Peer(factory)
    body = MetadataRequest[1](topics=["..", "a/b", "x" * 300, ""]).encode()
    peer.send(struct.pack(">ihhih", 10 + len(body), 3, 1, 12, -1) + body)
    [frame] = peer.responses()
    assert [(t[0], t[1]) for t in MetadataResponse[1].decode(frame[4:]).topics] == [
        (17, ".."), (17, "a/b"), (17, "x" * 300), (17, "")]
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == []


def test_find_coordinator_names_this_broker_without_zookeeper(factory):
    from twisted_broker.codec.kafka.api_keys import FIND_COORDINATOR
    from twisted_broker.codec.kafka.protocol import decode_response, encode_request

    peer = Peer(factory)
    peer.send(encode_request(FIND_COORDINATOR, 1, 4, "t", {"key": "my-group", "key_type": 0})
              + encode_request(FIND_COORDINATOR, 1, 5, "t", {"key": "txn", "key_type": 1}))
    group, transaction = [decode_response(FIND_COORDINATOR, 1, frame)[1] for frame in peer.responses()]
    assert (group["error_code"], group["node_id"], group["host"], group["port"]) == (0, 3, "broker.example", 9094)
    assert transaction["error_code"] == 15  # no transactions: no transaction coordinator


def test_metadata_v0_with_no_topics_lists_every_topic_and_v1_with_none_lists_none(factory):
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    peer = Peer(factory)
    fresh = MetadataRequest[1](topics=["made"]).encode()
    peer.send(struct.pack(">ihhih", 10 + len(fresh), 3, 1, 1, -1) + fresh)  # auto-created
    every = MetadataRequest[0](topics=[]).encode()
    none = MetadataRequest[1](topics=[]).encode()
    peer.send(struct.pack(">ihhih", 10 + len(every), 3, 0, 2, -1) + every
              + struct.pack(">ihhih", 10 + len(none), 3, 1, 3, -1) + none)
    _created, v0, v1 = peer.responses()
    assert [t[1] for t in MetadataResponse[0].decode(v0[4:]).topics] == ["made"]
    assert MetadataResponse[1].decode(v1[4:]).topics == []


# --- decode_frame: what the listener refuses, named -------------------------------------------

@pytest.mark.parametrize("name, reason", [
    ("unknown api key", "malformed request: unknown request type 99"),
    ("unserved version", "malformed request: Metadata v9 is not supported (v0-v7 are)"),
    ("truncated body", "malformed request: truncated at byte"),
    ("too short for a header", "malformed request: truncated at byte"),
])
def test_decode_frame_refuses_with_the_reason_the_warning_gives(factory, name, reason):
    table = factory._table
    with pytest.raises(RefusedRequest) as refused:
        decode_frame(memoryview(BAD_FRAMES[name])[4:], table.api_keys)
    assert str(refused.value).startswith(reason)


def test_decode_frame_hands_on_an_api_versions_request_of_an_unserved_version_without_a_body(factory):
    request = decode_frame(b"\x00\x12" b"\x00\x63" b"\x00\x00\x00\x07" b"\xff\xff", factory._table.api_keys)
    assert (request.api_key, request.api_version, request.correlation_id, request.body) == (18, 99, 7, None)
