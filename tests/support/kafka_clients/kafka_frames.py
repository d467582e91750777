"""Kafka request frames written by hand from the protocol's published layouts, for the tests
that talk to the modern port below the clients: the capability probe (ApiVersions), the
ApiVersions v3 fallback and the bad-input cases. Never the broker's own codecs.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id string16.
ApiVersions response v0: correlation_id int32, error_code int16, [api_key, min, max int16]
(v1 and v2 add throttle_time_ms int32 after the array).
"""

from __future__ import annotations

import struct

from tests.support.brokers import WireClient

API_VERSIONS = 18
METADATA = 3
UNSUPPORTED_VERSION = 35

# The API keys the tests need by name (Kafka's numbering).
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
             9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
             13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
             18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId"}


def string16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def frame(api_key: int, api_version: int, correlation_id: int, body: bytes = b"",
          client_id: str | None = "tests-modern") -> bytes:
    """One size-prefixed request with a v1 header."""
    payload = struct.pack(">hhi", api_key, api_version, correlation_id) + string16(client_id) + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_v3(correlation_id: int) -> bytes:
    """ApiVersions v3 as librdkafka sends it: header v2 (v1 + empty tagged fields), then the
    flexible body: client_software_name and _version as compact strings, empty tagged fields."""
    body = b"\x00"  # header tagged fields
    for text in (b"librdkafka", b"2.0.2"):
        body += bytes([len(text) + 1]) + text
    body += b"\x00"  # body tagged fields
    return frame(API_VERSIONS, 3, correlation_id, body, client_id="rdkafka")


def metadata_v1(correlation_id: int, topics: list[str] | None = None) -> bytes:
    """Metadata v1 (null topic array: every topic)."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(string16(t) for t in topics)
    return frame(METADATA, 1, correlation_id, body)


class Connection(WireClient):
    """A blocking socket to the modern port (the 0.7 tests' client: frames are sized alike);
    ``response()`` is one answer without its size, correlation id first."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        super().__init__(("127.0.0.1", port), timeout_s)


def decode_api_versions(body: bytes, version: int = 0) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api key: (min, max)}) of an ApiVersions response."""
    correlation_id, error, count = struct.unpack_from(">ihi", body, 0)
    position = 10
    apis = {}
    for _ in range(count):
        key, low, high = struct.unpack_from(">hhh", body, position)
        apis[key] = (low, high)
        position += 6
    expected_end = position + (4 if version >= 1 else 0)
    if len(body) != expected_end:
        raise ValueError(f"ApiVersions v{version} answer of {len(body)} bytes, expected {expected_end}")
    return correlation_id, error, apis


def api_versions(port: int, timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    """The listener's ApiVersions v0 answer: {api key: (min version, max version)}."""
    with Connection(port, timeout_s) as connection:
        correlation_id, error, apis = decode_api_versions(connection.request(frame(API_VERSIONS, 0, 7)))
    if correlation_id != 7 or error:
        raise AssertionError(f"ApiVersions v0 answered correlation id {correlation_id}, error {error}")
    return apis


def _string(body: bytes, position: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", body, position)
    if length < 0:
        return None, position + 2
    return body[position + 2:position + 2 + length].decode(), position + 2 + length


def decode_metadata_v1(body: bytes) -> dict:
    """Metadata v1's answer: {"correlation_id", "brokers": {node id: (host, port)},
    "controller_id", "topics": {name: (error, {partition: (error, leader, replicas, isr)})}}."""
    correlation_id, count = struct.unpack_from(">ii", body, 0)
    position, brokers = 8, {}
    for _ in range(count):
        (node_id,) = struct.unpack_from(">i", body, position)
        host, position = _string(body, position + 4)
        (port,) = struct.unpack_from(">i", body, position)
        _rack, position = _string(body, position + 4)
        brokers[node_id] = (host, port)
    controller_id, count = struct.unpack_from(">ii", body, position)
    position += 8
    topics = {}
    for _ in range(count):
        (topic_error,) = struct.unpack_from(">h", body, position)
        name, position = _string(body, position + 2)
        position += 1  # is_internal
        (partition_count,) = struct.unpack_from(">i", body, position)
        position += 4
        partitions = {}
        for _ in range(partition_count):
            error, partition, leader, replica_count = struct.unpack_from(">hiii", body, position)
            position += 14
            replicas = struct.unpack_from(f">{replica_count}i", body, position)
            position += 4 * replica_count
            (isr_count,) = struct.unpack_from(">i", body, position)
            isr = struct.unpack_from(f">{isr_count}i", body, position + 4)
            position += 4 + 4 * isr_count
            partitions[partition] = (error, leader, replicas, isr)
        topics[name] = (topic_error, partitions)
    if position != len(body):
        raise ValueError(f"Metadata v1 answer of {len(body)} bytes, decoded {position}")
    return {"correlation_id": correlation_id, "brokers": brokers, "controller_id": controller_id,
            "topics": topics}
