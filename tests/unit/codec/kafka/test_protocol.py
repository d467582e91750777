"""Request and response frames: headers, the schema tables, ApiVersions' fallback answer."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka.api_keys import API_VERSIONS, METADATA, SUPPORTED
from twisted_broker.codec.kafka.errors import UNSUPPORTED_VERSION
from twisted_broker.codec.kafka.primitives import Malformed
from twisted_broker.codec.kafka.protocol import (
    REQUESTS, RESPONSES, UnsupportedVersion, api_versions_body, decode_request, decode_response,
    encode_request, encode_response, encode_response_chunks, peek_header,
    unsupported_api_versions_response,
)
from twisted_broker.codec.kafka.schema import SchemaError
from tests.unit.codec.kafka.schema_values import plain, values_of

METADATA_V1_ALL = (b"\x00\x00\x00\x11"          # size: 17 bytes follow
                   b"\x00\x03"                  # api key: Metadata
                   b"\x00\x01"                  # api version: 1
                   b"\x00\x00\x00\x07"          # correlation id: 7
                   b"\x00\x03" b"cli"           # client id: "cli"
                   b"\xff\xff\xff\xff")         # topics: null (all topics)


def test_request_header_v1_and_body_decode():
    request = decode_request(METADATA_V1_ALL[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (METADATA, 1, 7)
    assert request.client_id == "cli"
    assert request.body == {"topics": None}


def test_encode_request_writes_the_same_frame():
    assert encode_request(METADATA, 1, 7, "cli", {"topics": None}) == METADATA_V1_ALL


def test_null_client_id_is_accepted():
    frame = encode_request(API_VERSIONS, 0, 1, None, {})
    assert decode_request(frame[4:]).client_id is None


def test_unsupported_version_is_raised_with_the_correlation_id_before_the_body():
    frame = b"\x00\x12" b"\x00\x03" b"\x00\x00\x00\x2a" b"garbage that is not a v1 header"
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(frame)
    assert (caught.value.api_key, caught.value.api_version, caught.value.correlation_id) == (18, 3, 42)


def test_unknown_api_key_is_unsupported():
    with pytest.raises(UnsupportedVersion):
        decode_request(b"\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff")


def test_trailing_bytes_after_the_body_are_malformed():
    with pytest.raises(Malformed):
        decode_request(METADATA_V1_ALL[4:] + b"\x00")


@pytest.mark.parametrize("cut", range(0, len(METADATA_V1_ALL) - 4))
def test_a_request_cut_anywhere_is_truncated(cut):
    with pytest.raises((Truncated, Malformed)):
        decode_request(METADATA_V1_ALL[4:4 + cut])


def test_peek_header_reads_only_the_fixed_fields():
    assert peek_header(b"\x00\x12\x00\x03\x00\x00\x00\x09") == (18, 3, 9)


def test_newer_api_versions_gets_error_35_in_the_v0_layout_with_the_supported_list():
    frame = unsupported_api_versions_response(9)
    size, correlation = int.from_bytes(frame[:4], "big"), int.from_bytes(frame[4:8], "big")
    assert size == len(frame) - 4 and correlation == 9
    assert frame[8:10] == b"\x00\x23"  # error code 35
    _, body = decode_response(API_VERSIONS, 0, frame[4:])
    assert body["error_code"] == UNSUPPORTED_VERSION
    served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert served == SUPPORTED


def test_api_versions_v1_adds_throttle_time_after_the_list():
    frame = encode_response(API_VERSIONS, 1, 3, api_versions_body())
    assert frame[-4:] == b"\x00\x00\x00\x00"
    assert decode_response(API_VERSIONS, 1, frame[4:])[1]["throttle_time_ms"] == 0


def test_a_missing_field_without_default_names_its_path():
    body = {"brokers": [], "topics": [{"error_code": 0, "name": "t", "partitions": [{"error_code": 0}]}]}
    with pytest.raises(SchemaError, match="partition_index"):
        encode_response(METADATA, 0, 1, body)


def test_one_body_serves_every_version_fields_are_picked_per_version():
    body = {"throttle_time_ms": 5, "brokers": [{"node_id": 1, "host": "h", "port": 9094}],
            "controller_id": 1, "cluster_id": "c",
            "topics": [{"error_code": 0, "name": "t", "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                 "replica_nodes": [1], "isr_nodes": [1]}]}]}
    v0 = decode_response(METADATA, 0, encode_response(METADATA, 0, 1, body)[4:])[1]
    v7 = decode_response(METADATA, 7, encode_response(METADATA, 7, 1, body)[4:])[1]
    assert "controller_id" not in v0 and "leader_epoch" not in v0["topics"][0]["partitions"][0]
    assert v7["controller_id"] == 1 and v7["cluster_id"] == "c" and v7["throttle_time_ms"] == 5
    assert v7["topics"][0]["partitions"][0]["leader_epoch"] == 3
    assert v7["topics"][0]["partitions"][0]["offline_replicas"] == []  # the table's default


def test_a_response_without_gaps_is_one_chunk_equal_to_the_frame():
    chunks = encode_response_chunks(API_VERSIONS, 0, 4, api_versions_body())
    assert chunks == [encode_response(API_VERSIONS, 0, 4, api_versions_body())]


def test_every_served_version_has_request_and_response_schemas():
    for api_key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            assert (api_key, version) in REQUESTS, (api_key, version)
            assert (api_key, version) in RESPONSES, (api_key, version)


def test_no_schema_outside_the_served_versions():
    served = {(key, v) for key, (low, high) in SUPPORTED.items() for v in range(low, high + 1)}
    assert set(REQUESTS) == set(RESPONSES) == served


# Every schema in one example (pytest-twisted's hook breaks @given under @parametrize).
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_request_schema_round_trips(data):
    for key, schema in sorted(REQUESTS.items()):
        body = data.draw(values_of(schema), label=str(key))
        frame = encode_request(key[0], key[1], 11, "client", body)
        request = decode_request(memoryview(frame)[4:])
        assert (request.api_key, request.api_version, request.correlation_id) == (key[0], key[1], 11)
        assert plain(request.body) == body


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_response_schema_round_trips(data):
    for key, schema in sorted(RESPONSES.items()):
        body = data.draw(values_of(schema), label=str(key))
        frame = encode_response(key[0], key[1], 12, body)
        correlation_id, decoded = decode_response(key[0], key[1], memoryview(frame)[4:])
        assert correlation_id == 12
        assert plain(decoded) == body
