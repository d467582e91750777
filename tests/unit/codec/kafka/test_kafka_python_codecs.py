"""kafka-python as an independent codec: its classes built from Kafka's own JSON message
specs (kafka.protocol.*), its hand-written 2.x classes (kafka.protocol.old.*) for golden
bytes, and its record batch builder and reader (kafka.record.*)."""

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from kafka.protocol import admin, consumer, metadata, producer, sasl
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.old import api_versions as old_api_versions
from kafka.protocol.old import fetch as old_fetch
from kafka.protocol.old import group as old_group
from kafka.protocol.old import metadata as old_metadata
from kafka.protocol.old import produce as old_produce
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from twisted_broker.codec.kafka import record_compression
from twisted_broker.codec.kafka.api_keys import API_VERSIONS, FETCH, JOIN_GROUP, METADATA, PRODUCE
from twisted_broker.codec.kafka.primitives import Gap
from twisted_broker.codec.kafka.protocol import (
    REQUESTS, RESPONSES, api_versions_body, decode_request, decode_response, encode_request,
    encode_response, encode_response_chunks,
)
from twisted_broker.codec.kafka.record_batch import batch_values, build_batch, decode_batch
from tests.unit.codec.kafka.schema_values import plain, values_of

# Names Kafka's specs changed after 2.1 (KIP-848), for the same field.
RENAMED = {"generation_id_or_member_epoch": "generation_id"}


def _their_classes():
    found = {}
    for module in (metadata, consumer, producer, admin, sasl):
        for name in dir(module):
            cls = getattr(module, name)
            if isinstance(cls, type) and issubclass(cls, ApiMessage) and cls is not ApiMessage:
                found[cls.API_KEY, cls.type] = cls
    return found


THEIRS = _their_classes()


def renamed(value):
    if isinstance(value, dict):
        return {RENAMED.get(k, k): renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v) for v in value]
    return value


def test_kafka_python_has_a_class_for_every_api_served():
    assert {key for key, _ in REQUESTS} <= {key for key, kind in THEIRS if kind == "request"}


def _cross_check(table, kind, data):
    for (api_key, version), schema in sorted(table.items()):
        value = data.draw(values_of(schema), label=f"{api_key} v{version}")
        if (api_key, kind) == (API_VERSIONS, "response"):
            value["error_code"] = 0  # kafka-python reads an error answer as v0, as clients must
        ours = schema.to_bytes(value)
        cls = THEIRS[api_key, kind]
        theirs = cls.decode(ours, version=version)
        assert renamed(theirs.to_dict(json=False)) == plain(value), (api_key, version)
        assert cls._struct.encode(theirs, version=version) == ours, (api_key, version)


# No shrinking: a failure names its (api key, version), and shrinking 69 draws takes minutes.
CROSS_CHECK = settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])


@CROSS_CHECK
@given(data=st.data())
def test_every_request_schema_reads_and_writes_as_kafkas_spec(data):
    _cross_check(REQUESTS, "request", data)


@CROSS_CHECK
@given(data=st.data())
def test_every_response_schema_reads_and_writes_as_kafkas_spec(data):
    _cross_check(RESPONSES, "response", data)


# -- golden bytes from kafka-python's hand-written 2.x classes --------------------------

def test_metadata_v7_request_and_response_match_kafka_python():
    request = old_metadata.MetadataRequest[7](topics=["a", "b"], allow_auto_topic_creation=False).encode()
    assert REQUESTS[METADATA, 7].decode(request, 0) == (
        {"topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": False}, len(request))
    response = old_metadata.MetadataResponse[7](
        0, [(1, "h1", 9094, None), (2, "h2", 9194, "r")], "cluster", 1,
        [(0, "t", False, [(0, 0, 1, 4, [1, 2], [1], [])])]).encode()
    body = {"throttle_time_ms": 0, "cluster_id": "cluster", "controller_id": 1,
            "brokers": [{"node_id": 1, "host": "h1", "port": 9094, "rack": None},
                        {"node_id": 2, "host": "h2", "port": 9194, "rack": "r"}],
            "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 4,
                 "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": []}]}]}
    assert RESPONSES[METADATA, 7].to_bytes(body) == response


def test_metadata_v0_request_matches_kafka_python():
    request = old_metadata.MetadataRequest[0](topics=[]).encode()
    assert request == b"\x00\x00\x00\x00"  # no topics: all of them, in v0
    assert REQUESTS[METADATA, 0].decode(request, 0)[0] == {"topics": []}


def test_produce_v7_request_with_kafka_pythons_batch_decodes():
    batch = bytes(_their_batch(record_compression.NO_COMPRESSION, [(b"k", b"v", [])]))
    request = old_produce.ProduceRequest[7](None, -1, 30000, [("t", [(3, batch)])]).encode()
    body, _ = REQUESTS[PRODUCE, 7].decode(request, 0)
    assert (body["acks"], body["timeout_ms"]) == (-1, 30000)
    partition = body["topic_data"][0]["partition_data"][0]
    assert partition["index"] == 3 and bytes(partition["records"]) == batch
    assert batch_values(partition["records"]) == [b"v"]


def test_produce_v5_response_matches_kafka_python():
    theirs = old_produce.ProduceResponse[5]([("t", [(3, 0, 1200, -1, 100)])], 0).encode()
    ours = RESPONSES[PRODUCE, 5].to_bytes({"responses": [{"name": "t", "partition_responses": [
        {"index": 3, "error_code": 0, "base_offset": 1200, "log_start_offset": 100}]}]})
    assert ours == theirs


def test_fetch_v10_request_from_kafka_python_decodes():
    request = old_fetch.FetchRequest[10](-1, 500, 1, 1 << 20, 0, 0, -1,
                                         [("t", [(0, -1, 42, -1, 1 << 20)])], []).encode()
    body, _ = REQUESTS[FETCH, 10].decode(request, 0)
    assert body["topics"] == [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 42, "log_start_offset": -1,
         "partition_max_bytes": 1 << 20}]}]
    assert (body["max_wait_ms"], body["min_bytes"], body["session_epoch"]) == (500, 1, -1)


def test_fetch_v10_response_with_a_gap_is_what_kafka_python_reads():
    batch = build_batch([(1000, b"k", b"value")], base_offset=7)
    body = {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 8, "last_stable_offset": 8,
         "log_start_offset": 0, "aborted_transactions": None, "records": Gap(len(batch), "region")}]}]}
    chunks = encode_response_chunks(FETCH, 10, 99, body)
    assert [type(c) for c in chunks] == [bytes, Gap]  # the records end the frame
    frame = b"".join(batch if type(c) is Gap else c for c in chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    body["responses"][0]["partitions"][0]["records"] = batch
    assert frame == encode_response(FETCH, 10, 99, body)
    theirs = old_fetch.FetchResponse[10].decode(frame[8:])
    partition = theirs.topics[0][1][0]
    assert partition[0] == 0 and partition[2] == 8
    assert [r.value for r in DefaultRecordBatch(partition[-1])] == [b"value"]


def test_api_versions_v2_response_is_what_kafka_python_reads():
    frame = encode_response(API_VERSIONS, 2, 1, api_versions_body())
    theirs = old_api_versions.ApiVersionsResponse[2].decode(frame[8:])
    assert theirs.error_code == 0
    assert (JOIN_GROUP, 0, 3) in [tuple(k) for k in theirs.api_versions]
    request = old_api_versions.ApiVersionsRequest[2]().encode()
    assert request == b"" and REQUESTS[API_VERSIONS, 2].decode(request, 0) == ({}, 0)


def test_join_group_v3_request_and_response_match_kafka_python():
    request = old_group.JoinGroupRequest[3]("g", 10000, 30000, "", "consumer", [("range", b"\x00\x01")]).encode()
    assert REQUESTS[JOIN_GROUP, 3].decode(request, 0)[0] == {
        "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}
    response = old_group.JoinGroupResponse[3](0, 0, 1, "range", "m1", "m1", [("m1", b"meta")]).encode()
    assert RESPONSES[JOIN_GROUP, 3].to_bytes({
        "error_code": 0, "generation_id": 1, "protocol_name": "range", "leader": "m1", "member_id": "m1",
        "members": [{"member_id": "m1", "metadata": b"meta"}]}) == response


def test_a_whole_request_frame_from_kafka_python_decodes():
    request = old_metadata.MetadataRequest[1](topics=None)
    header = b"\x00\x03\x00\x01\x00\x00\x00\x05\x00\x02py"  # Metadata v1, correlation 5, "py"
    payload = header + request.encode()
    decoded = decode_request(payload)
    assert (decoded.correlation_id, decoded.client_id, decoded.body) == (5, "py", {"topics": None})
    assert encode_request(METADATA, 1, 5, "py", {"topics": None})[4:] == payload
    assert decode_response(METADATA, 1, encode_response(METADATA, 1, 5, {
        "brokers": [], "controller_id": -1, "topics": []})[4:])[0] == 5


# -- record batches against kafka-python's builder and reader ---------------------------

def _their_batch(codec, items, base_sequence=-1, producer_id=-1):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for offset, (key, value, headers) in enumerate(items):
        builder.append(offset, timestamp=1_700_000_000_000 + offset, key=key, value=value, headers=headers)
    return builder.build()


ITEMS = [(b"key", b"value", [("h", b"1")]), (None, b"x" * 3000, []), (b"k2", None, [("a", None)])]


@pytest.mark.parametrize("codec", sorted(record_compression.RECORD_CODEC_NAMES),
                         ids=lambda c: record_compression.RECORD_CODEC_NAMES[c])
def test_kafka_python_batches_decode_with_every_codec(codec):
    batch = bytes(_their_batch(codec, ITEMS, base_sequence=5, producer_id=77))
    header, records = decode_batch(batch)
    assert (header.compression, header.producer_id, header.base_sequence) == (codec, 77, 5)
    assert [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in records] == \
        [(i, 1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(ITEMS)]
    assert batch_values(batch) == [v for _, v, _ in ITEMS]


@pytest.mark.parametrize("codec", sorted(record_compression.RECORD_CODEC_NAMES),
                         ids=lambda c: record_compression.RECORD_CODEC_NAMES[c])
def test_our_batches_decode_with_kafka_python(codec):
    batch = build_batch([(1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(ITEMS)],
                        base_offset=40, compression=codec)
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc() and theirs.compression_type == codec
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == \
        [(40 + i, 1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(ITEMS)]


def test_an_uncompressed_batch_is_byte_for_byte_kafka_pythons():
    items = [(1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(ITEMS)]
    # kafka-python leaves the leader epoch 0 where Java writes -1: the broker stamps it anyway.
    ours = build_batch(items, partition_leader_epoch=0)
    assert ours == bytes(_their_batch(record_compression.NO_COMPRESSION, ITEMS))
