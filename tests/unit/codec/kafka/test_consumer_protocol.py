"""The consumer protocol's subscription and assignment, as kafka-python writes them."""

import pytest
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0, ConsumerProtocolMemberMetadata_v0,
)

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka.consumer_protocol import (
    assigned_partitions, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription,
)


def test_kafka_pythons_subscription_decodes():
    data = ConsumerProtocolMemberMetadata_v0(0, ["a", "b"], b"").encode()
    assert decode_subscription(data) == {"version": 0, "topics": ["a", "b"], "user_data": b""}


def test_a_newer_subscription_decodes_its_version_0_fields():
    # v1 (Kafka 2.4) appends owned partitions: an array of (topic, [partition]).
    v1 = (b"\x00\x01" + ConsumerProtocolMemberMetadata_v0(0, ["a"], None).encode()[2:]
          + b"\x00\x00\x00\x01" b"\x00\x01a" b"\x00\x00\x00\x01" b"\x00\x00\x00\x02")
    assert decode_subscription(v1)["topics"] == ["a"]


def test_kafka_pythons_assignment_decodes():
    data = ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 2]), ("u", [1])], b"").encode()
    assert assigned_partitions(data) == {"t": [0, 2], "u": [1]}


def test_our_encodings_are_kafka_pythons():
    assert encode_subscription(["a"], b"x") == ConsumerProtocolMemberMetadata_v0(0, ["a"], b"x").encode()
    assert encode_assignment({"t": [2, 0]}) == ConsumerProtocolMemberAssignment_v0(0, [("t", [0, 2])], None).encode()


def test_an_empty_assignment_is_no_partitions():
    assert decode_assignment(b"")["assigned_partitions"] == []


def test_a_truncated_assignment_is_an_error():
    data = encode_assignment({"t": [0]})
    with pytest.raises(Truncated):
        decode_assignment(data[:-6])
