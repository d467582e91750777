"""Schemas of the APIs that read and write partitions' logs: Produce, Fetch, ListOffsets
(Kafka 2.1 layouts, non-flexible encodings). Field names are Kafka's message specs' names in
snake case, as in cluster_schemas.py.

Record sets are ``RECORDS`` fields: a produced set decodes to a memoryview of the request
frame (never copied or parsed here; record_batch.py reads it), and a fetched set is encoded
either from bytes or, on the zero-copy path, from a ``Gap``.

How a Fetch response goes out without copying its records
----------------------------------------------------------
The handler builds the response body as usual but puts, as each partition's ``records``,
a ``Gap(size, fill)`` instead of bytes: ``size`` is the exact number of record bytes the
listener will send for that partition (the sum of the stored batches' sizes it chose) and
``fill`` anything the listener needs to send them (its file regions, say). Then::

    chunks = protocol.encode_response_chunks(FETCH, version, correlation_id, body)

returns the whole frame as a list of ``bytes`` (size prefix, header, every field the schema
has) and the ``Gap`` objects, in wire order. The frame size in the first chunk already counts
each gap's ``size``. The listener writes each bytes chunk as is and, for each Gap, exactly
``gap.size`` bytes from ``gap.fill`` (sendfile), in order. Partitions with no data or an
error give ``b""`` (or a small Python-built message set) as plain bytes instead of a Gap.
"""

from __future__ import annotations

from twisted_broker.codec.kafka.api_keys import FETCH, LIST_OFFSETS, PRODUCE
from twisted_broker.codec.kafka.primitives import (
    INT8_T, INT16_T, INT32_T, INT64_T, NULLABLE_STRING, RECORDS, STRING, Array, NullableArray,
)
from twisted_broker.codec.kafka.schema import Schema, in_array

# ListOffsets' special timestamps, and Fetch/ListOffsets isolation levels.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
READ_UNCOMMITTED = 0
READ_COMMITTED = 1  # without transactions, the same records as READ_UNCOMMITTED

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}

# -- Produce (0) ----------------------------------------------------------------------------
_PRODUCE_REQUEST = Schema(
    ("transactional_id", NULLABLE_STRING, None),
    ("acks", INT16_T),
    ("timeout_ms", INT32_T),
    ("topic_data", Array(Schema(
        ("name", STRING),
        ("partition_data", Array(Schema(("index", INT32_T), ("records", RECORDS)))),
    ))),
)
_PRODUCE_PARTITION_V3 = Schema(
    ("index", INT32_T),
    ("error_code", INT16_T),
    ("base_offset", INT64_T),
    ("log_append_time_ms", INT64_T, -1),  # -1: the batch keeps the producer's CreateTime
)
_PRODUCE_PARTITION_V5 = _PRODUCE_PARTITION_V3.evolve(add=[("log_start_offset", INT64_T, -1)])
_PRODUCE_V3 = Schema(
    ("responses", Array(Schema(("name", STRING), ("partition_responses", Array(_PRODUCE_PARTITION_V3))))),
    ("throttle_time_ms", INT32_T, 0),
)
_PRODUCE_V5 = _PRODUCE_V3.evolve(
    change={"responses": in_array({"partition_responses": Array(_PRODUCE_PARTITION_V5)})})
for _v in range(3, 8):
    REQUESTS[PRODUCE, _v] = _PRODUCE_REQUEST
    RESPONSES[PRODUCE, _v] = _PRODUCE_V3 if _v < 5 else _PRODUCE_V5

# -- Fetch (1) ------------------------------------------------------------------------------
_FETCH_PARTITION_V4 = Schema(("partition", INT32_T), ("fetch_offset", INT64_T), ("partition_max_bytes", INT32_T))
_FETCH_PARTITION_V5 = _FETCH_PARTITION_V4.evolve(add=[("log_start_offset", INT64_T, -1)],
                                                 before="partition_max_bytes")
_FETCH_PARTITION_V9 = _FETCH_PARTITION_V5.evolve(add=[("current_leader_epoch", INT32_T, -1)],
                                                 before="fetch_offset")


def _fetch_request(partition: Schema) -> Schema:
    return Schema(
        ("replica_id", INT32_T, -1),  # -1: a consumer, not a follower
        ("max_wait_ms", INT32_T),
        ("min_bytes", INT32_T),
        ("max_bytes", INT32_T),
        ("isolation_level", INT8_T, 0),
        ("topics", Array(Schema(("topic", STRING), ("partitions", Array(partition))))),
    )


_FORGOTTEN = ("forgotten_topics_data", Array(Schema(("topic", STRING), ("partitions", Array(INT32_T)))), [])
_FETCH_REQUEST_V4 = _fetch_request(_FETCH_PARTITION_V4)
_FETCH_REQUEST_V5 = _fetch_request(_FETCH_PARTITION_V5)
# v7 (KIP-227): fetch sessions. This broker keeps none: it answers session id 0, which a
# client takes as "send full requests", so the session fields are read and ignored.
_FETCH_REQUEST_V7 = _FETCH_REQUEST_V5.evolve(add=[("session_id", INT32_T, 0), ("session_epoch", INT32_T, -1)],
                                             before="topics").evolve(add=[_FORGOTTEN])
_FETCH_REQUEST_V9 = _fetch_request(_FETCH_PARTITION_V9).evolve(
    add=[("session_id", INT32_T, 0), ("session_epoch", INT32_T, -1)], before="topics").evolve(add=[_FORGOTTEN])

_ABORTED = ("aborted_transactions", NullableArray(Schema(("producer_id", INT64_T), ("first_offset", INT64_T))), None)
_FETCH_RESPONSE_PARTITION_V4 = Schema(
    ("partition_index", INT32_T),
    ("error_code", INT16_T),
    ("high_watermark", INT64_T),
    ("last_stable_offset", INT64_T),  # = the high watermark here: no transactions
    _ABORTED,
    ("records", RECORDS),
)
_FETCH_RESPONSE_PARTITION_V5 = _FETCH_RESPONSE_PARTITION_V4.evolve(
    add=[("log_start_offset", INT64_T)], before="aborted_transactions")


def _fetch_response(partition: Schema) -> Schema:
    return Schema(
        ("throttle_time_ms", INT32_T, 0),
        ("responses", Array(Schema(("topic", STRING), ("partitions", Array(partition))))),
    )


_FETCH_V4 = _fetch_response(_FETCH_RESPONSE_PARTITION_V4)
_FETCH_V5 = _fetch_response(_FETCH_RESPONSE_PARTITION_V5)
_FETCH_V7 = _FETCH_V5.evolve(add=[("error_code", INT16_T, 0), ("session_id", INT32_T, 0)], before="responses")
for _v in range(4, 11):
    REQUESTS[FETCH, _v] = (_FETCH_REQUEST_V4 if _v == 4 else _FETCH_REQUEST_V5 if _v < 7
                           else _FETCH_REQUEST_V7 if _v < 9 else _FETCH_REQUEST_V9)
    RESPONSES[FETCH, _v] = _FETCH_V4 if _v == 4 else _FETCH_V5 if _v < 7 else _FETCH_V7

# -- ListOffsets (2) ------------------------------------------------------------------------
# timestamp LATEST_TIMESTAMP: the log end, EARLIEST_TIMESTAMP: the log start; else the
# first record at or after that time (ms).
_LIST_OFFSETS_PARTITION_V1 = Schema(("partition_index", INT32_T), ("timestamp", INT64_T))
_LIST_OFFSETS_PARTITION_V4 = _LIST_OFFSETS_PARTITION_V1.evolve(
    add=[("current_leader_epoch", INT32_T, -1)], before="timestamp")


def _list_offsets_request(partition: Schema) -> Schema:
    return Schema(("replica_id", INT32_T, -1),
                  ("topics", Array(Schema(("name", STRING), ("partitions", Array(partition))))))


_LIST_OFFSETS_REQUEST_V1 = _list_offsets_request(_LIST_OFFSETS_PARTITION_V1)
_LIST_OFFSETS_REQUEST_V2 = _LIST_OFFSETS_REQUEST_V1.evolve(add=[("isolation_level", INT8_T, 0)], before="topics")
_LIST_OFFSETS_REQUEST_V4 = _list_offsets_request(_LIST_OFFSETS_PARTITION_V4).evolve(
    add=[("isolation_level", INT8_T, 0)], before="topics")

_LIST_OFFSETS_RESPONSE_PARTITION_V1 = Schema(
    ("partition_index", INT32_T), ("error_code", INT16_T), ("timestamp", INT64_T), ("offset", INT64_T))
_LIST_OFFSETS_RESPONSE_PARTITION_V4 = _LIST_OFFSETS_RESPONSE_PARTITION_V1.evolve(
    add=[("leader_epoch", INT32_T, -1)])
_LIST_OFFSETS_V1 = Schema(
    ("topics", Array(Schema(("name", STRING), ("partitions", Array(_LIST_OFFSETS_RESPONSE_PARTITION_V1))))))
_LIST_OFFSETS_V2 = _LIST_OFFSETS_V1.evolve(add=[("throttle_time_ms", INT32_T, 0)], before="topics")
_LIST_OFFSETS_V4 = _LIST_OFFSETS_V2.evolve(
    change={"topics": in_array({"partitions": Array(_LIST_OFFSETS_RESPONSE_PARTITION_V4)})})
for _v in range(1, 5):
    REQUESTS[LIST_OFFSETS, _v] = (_LIST_OFFSETS_REQUEST_V1 if _v == 1 else _LIST_OFFSETS_REQUEST_V2 if _v < 4
                                  else _LIST_OFFSETS_REQUEST_V4)
    RESPONSES[LIST_OFFSETS, _v] = _LIST_OFFSETS_V1 if _v == 1 else _LIST_OFFSETS_V2 if _v < 4 else _LIST_OFFSETS_V4
