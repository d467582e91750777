"""Schemas of the cluster-level APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
InitProducerId (Kafka 2.1 layouts, non-flexible encodings).

Field names are Kafka's message specs' names in snake case. Each table lists a version's
fields in wire order; later versions are written as differences (Schema.evolve).
"""

from __future__ import annotations

from twisted_broker.codec.kafka.api_keys import (
    API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, METADATA,
)
from twisted_broker.codec.kafka.primitives import (
    BOOLEAN, INT16_T, INT32_T, INT64_T, NULLABLE_STRING, STRING, Array, NullableArray,
)
from twisted_broker.codec.kafka.schema import Schema, in_array

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}

# -- ApiVersions (18) -----------------------------------------------------------------------
_API_VERSIONS_REQUEST = Schema()
_API_VERSIONS_V0 = Schema(
    ("error_code", INT16_T),
    ("api_keys", Array(Schema(("api_key", INT16_T), ("min_version", INT16_T), ("max_version", INT16_T)))),
)
_API_VERSIONS_V1 = _API_VERSIONS_V0.evolve(add=[("throttle_time_ms", INT32_T, 0)])
for _v in range(3):
    REQUESTS[API_VERSIONS, _v] = _API_VERSIONS_REQUEST
    RESPONSES[API_VERSIONS, _v] = _API_VERSIONS_V0 if _v == 0 else _API_VERSIONS_V1

# -- Metadata (3) ---------------------------------------------------------------------------
# v0: an empty topic list means all topics; v1+: null means all, empty means none.
_METADATA_REQUEST_V0 = Schema(("topics", Array(Schema(("name", STRING)))))
_METADATA_REQUEST_V1 = Schema(("topics", NullableArray(Schema(("name", STRING)))))
_METADATA_REQUEST_V4 = _METADATA_REQUEST_V1.evolve(add=[("allow_auto_topic_creation", BOOLEAN, True)])

_BROKER_V0 = Schema(("node_id", INT32_T), ("host", STRING), ("port", INT32_T))
_BROKER_V1 = _BROKER_V0.evolve(add=[("rack", NULLABLE_STRING, None)])
_PARTITION_V0 = Schema(
    ("error_code", INT16_T),
    ("partition_index", INT32_T),
    ("leader_id", INT32_T),
    ("replica_nodes", Array(INT32_T)),
    ("isr_nodes", Array(INT32_T)),
)
_PARTITION_V5 = _PARTITION_V0.evolve(add=[("offline_replicas", Array(INT32_T), [])])
_PARTITION_V7 = _PARTITION_V5.evolve(add=[("leader_epoch", INT32_T, -1)], before="replica_nodes")
_TOPIC_V0 = Schema(("error_code", INT16_T), ("name", STRING), ("partitions", Array(_PARTITION_V0)))
_TOPIC_V1 = _TOPIC_V0.evolve(add=[("is_internal", BOOLEAN, False)], before="partitions")
_METADATA_V0 = Schema(("brokers", Array(_BROKER_V0)), ("topics", Array(_TOPIC_V0)))
_METADATA_V1 = Schema(("brokers", Array(_BROKER_V1)), ("controller_id", INT32_T), ("topics", Array(_TOPIC_V1)))
_METADATA_V2 = _METADATA_V1.evolve(add=[("cluster_id", NULLABLE_STRING, None)], before="controller_id")
_METADATA_V3 = _METADATA_V2.evolve(add=[("throttle_time_ms", INT32_T, 0)], before="brokers")
_METADATA_V5 = _METADATA_V3.evolve(change={"topics": in_array({"partitions": Array(_PARTITION_V5)})})
_METADATA_V7 = _METADATA_V3.evolve(change={"topics": in_array({"partitions": Array(_PARTITION_V7)})})
for _v, _request, _response in [
    (0, _METADATA_REQUEST_V0, _METADATA_V0), (1, _METADATA_REQUEST_V1, _METADATA_V1),
    (2, _METADATA_REQUEST_V1, _METADATA_V2), (3, _METADATA_REQUEST_V1, _METADATA_V3),
    (4, _METADATA_REQUEST_V4, _METADATA_V3), (5, _METADATA_REQUEST_V4, _METADATA_V5),
    (6, _METADATA_REQUEST_V4, _METADATA_V5), (7, _METADATA_REQUEST_V4, _METADATA_V7),
]:
    REQUESTS[METADATA, _v], RESPONSES[METADATA, _v] = _request, _response

# -- CreateTopics (19) ----------------------------------------------------------------------
# num_partitions / replication_factor -1 when explicit assignments are given.
_CREATE_REQUEST_V0 = Schema(
    ("topics", Array(Schema(
        ("name", STRING),
        ("num_partitions", INT32_T),
        ("replication_factor", INT16_T),
        ("assignments", Array(Schema(("partition_index", INT32_T), ("broker_ids", Array(INT32_T)))), []),
        ("configs", Array(Schema(("name", STRING), ("value", NULLABLE_STRING))), []),
    ))),
    ("timeout_ms", INT32_T),
)
_CREATE_REQUEST_V1 = _CREATE_REQUEST_V0.evolve(add=[("validate_only", BOOLEAN, False)])
_CREATE_V0 = Schema(("topics", Array(Schema(("name", STRING), ("error_code", INT16_T)))))
_CREATE_V1 = _CREATE_V0.evolve(change={"topics": in_array(
    lambda topic: topic.evolve(add=[("error_message", NULLABLE_STRING, None)]))})
_CREATE_V2 = _CREATE_V1.evolve(add=[("throttle_time_ms", INT32_T, 0)], before="topics")
for _v, _request, _response in [(0, _CREATE_REQUEST_V0, _CREATE_V0), (1, _CREATE_REQUEST_V1, _CREATE_V1),
                                (2, _CREATE_REQUEST_V1, _CREATE_V2), (3, _CREATE_REQUEST_V1, _CREATE_V2)]:
    REQUESTS[CREATE_TOPICS, _v], RESPONSES[CREATE_TOPICS, _v] = _request, _response

# -- DeleteTopics (20) ----------------------------------------------------------------------
_DELETE_REQUEST = Schema(("topic_names", Array(STRING)), ("timeout_ms", INT32_T))
_DELETE_V0 = Schema(("responses", Array(Schema(("name", STRING), ("error_code", INT16_T)))))
_DELETE_V1 = _DELETE_V0.evolve(add=[("throttle_time_ms", INT32_T, 0)], before="responses")
for _v in range(4):
    REQUESTS[DELETE_TOPICS, _v], RESPONSES[DELETE_TOPICS, _v] = _DELETE_REQUEST, _DELETE_V0 if _v == 0 else _DELETE_V1

# -- InitProducerId (22) --------------------------------------------------------------------
# A non-null transactional id asks for transactions, which this broker refuses (docs).
_INIT_PRODUCER_ID_REQUEST = Schema(("transactional_id", NULLABLE_STRING), ("transaction_timeout_ms", INT32_T))
_INIT_PRODUCER_ID = Schema(
    ("throttle_time_ms", INT32_T, 0), ("error_code", INT16_T), ("producer_id", INT64_T), ("producer_epoch", INT16_T))
for _v in range(2):
    REQUESTS[INIT_PRODUCER_ID, _v], RESPONSES[INIT_PRODUCER_ID, _v] = _INIT_PRODUCER_ID_REQUEST, _INIT_PRODUCER_ID
