"""The "consumer" protocol's embedded encodings: a member's subscription (JoinGroup metadata)
and its assignment (SyncGroup), which the broker passes on as opaque bytes.

Decoded only to show who consumes what (console, ``twisted-broker groups``). Kafka 2.1
clients write version 0; later clients append fields (owned partitions, generation, rack)
after version 0's, which these decoders ignore, as Kafka's own readers of older versions do.
"""

from __future__ import annotations

from twisted_broker.codec.kafka.primitives import (
    INT16_T, INT32_T, NULLABLE_BYTES, STRING, Array, Buffer,
)
from twisted_broker.codec.kafka.schema import Schema

PROTOCOL_TYPE = "consumer"

SUBSCRIPTION = Schema(
    ("version", INT16_T, 0),
    ("topics", Array(STRING)),
    ("user_data", NULLABLE_BYTES, None),
)
ASSIGNMENT = Schema(
    ("version", INT16_T, 0),
    ("assigned_partitions", Array(Schema(("topic", STRING), ("partitions", Array(INT32_T))))),
    ("user_data", NULLABLE_BYTES, None),
)


def decode_subscription(data: Buffer) -> dict:
    """``{"version", "topics", "user_data"}``. Raises Truncated or Malformed."""
    return SUBSCRIPTION.decode(data, 0)[0]


def decode_assignment(data: Buffer) -> dict:
    """``{"version", "assigned_partitions": [{"topic", "partitions"}], "user_data"}``.

    An empty assignment (a member given nothing, as Kafka sends it) decodes to no partitions.
    Raises Truncated or Malformed.
    """
    if not len(data):
        return {"version": 0, "assigned_partitions": [], "user_data": None}
    return ASSIGNMENT.decode(data, 0)[0]


def assigned_partitions(data: Buffer) -> dict[str, list[int]]:
    """An assignment as ``{topic: [partition, ...]}``."""
    return {item["topic"]: item["partitions"] for item in decode_assignment(data)["assigned_partitions"]}


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    return SUBSCRIPTION.to_bytes({"topics": topics, "user_data": user_data})


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    return ASSIGNMENT.to_bytes({
        "assigned_partitions": [{"topic": topic, "partitions": sorted(parts)}
                                for topic, parts in sorted(partitions.items())],
        "user_data": user_data,
    })
