"""Schemas of the consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups (Kafka 2.1 layouts,
non-flexible encodings). Field names are Kafka's message specs' names in snake case, as in
cluster_schemas.py, except OffsetCommit's ``generation_id`` (Kafka 2.1's name; later specs
call it generation_id_or_member_epoch).

Member metadata (JoinGroup) and assignments (SyncGroup) are opaque BYTES to the broker;
consumer_protocol.py decodes the "consumer" protocol's for display.
"""

from __future__ import annotations

from twisted_broker.codec.kafka.api_keys import (
    DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS,
    OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP,
)
from twisted_broker.codec.kafka.primitives import (
    BYTES, INT8_T, INT16_T, INT32_T, INT64_T, NULLABLE_STRING, STRING, Array, NullableArray,
)
from twisted_broker.codec.kafka.schema import Schema, in_array

# FindCoordinator's key types.
GROUP_KEY = 0
TRANSACTION_KEY = 1  # refused: no transactions

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}

_THROTTLE = ("throttle_time_ms", INT32_T, 0)


def _register(api_key: int, requests: dict[int, Schema], responses: dict[int, Schema]) -> None:
    for version, schema in requests.items():
        REQUESTS[api_key, version] = schema
    for version, schema in responses.items():
        RESPONSES[api_key, version] = schema


def _throttled(schema: Schema) -> Schema:
    """``schema`` with throttle_time_ms first, as most APIs' second or third version adds it."""
    return schema.evolve(add=[_THROTTLE], before=schema.names[0])


# -- FindCoordinator (10) -------------------------------------------------------------------
_FIND_REQUEST_V0 = Schema(("key", STRING))
_FIND_REQUEST_V1 = _FIND_REQUEST_V0.evolve(add=[("key_type", INT8_T, 0)])
_FIND_V0 = Schema(("error_code", INT16_T), ("node_id", INT32_T), ("host", STRING), ("port", INT32_T))
_FIND_V1 = _throttled(_FIND_V0.evolve(add=[("error_message", NULLABLE_STRING, None)], before="node_id"))
_register(FIND_COORDINATOR, {0: _FIND_REQUEST_V0, 1: _FIND_REQUEST_V1, 2: _FIND_REQUEST_V1},
          {0: _FIND_V0, 1: _FIND_V1, 2: _FIND_V1})

# -- JoinGroup (11) -------------------------------------------------------------------------
_JOIN_REQUEST_V0 = Schema(
    ("group_id", STRING),
    ("session_timeout_ms", INT32_T),
    ("member_id", STRING),
    ("protocol_type", STRING),
    ("protocols", Array(Schema(("name", STRING), ("metadata", BYTES)))),
)
# v0 has no rebalance timeout: Kafka uses the session timeout for both.
_JOIN_REQUEST_V1 = _JOIN_REQUEST_V0.evolve(add=[("rebalance_timeout_ms", INT32_T)], before="member_id")
_JOIN_V0 = Schema(
    ("error_code", INT16_T),
    ("generation_id", INT32_T),
    ("protocol_name", STRING),
    ("leader", STRING),
    ("member_id", STRING),
    ("members", Array(Schema(("member_id", STRING), ("metadata", BYTES)))),  # for the leader only
)
_register(JOIN_GROUP, {0: _JOIN_REQUEST_V0, 1: _JOIN_REQUEST_V1, 2: _JOIN_REQUEST_V1, 3: _JOIN_REQUEST_V1},
          {0: _JOIN_V0, 1: _JOIN_V0, 2: _throttled(_JOIN_V0), 3: _throttled(_JOIN_V0)})

# -- SyncGroup (14) -------------------------------------------------------------------------
_SYNC_REQUEST = Schema(
    ("group_id", STRING),
    ("generation_id", INT32_T),
    ("member_id", STRING),
    ("assignments", Array(Schema(("member_id", STRING), ("assignment", BYTES)))),  # the leader's only
)
_SYNC_V0 = Schema(("error_code", INT16_T), ("assignment", BYTES))
_register(SYNC_GROUP, dict.fromkeys(range(3), _SYNC_REQUEST),
          {0: _SYNC_V0, 1: _throttled(_SYNC_V0), 2: _throttled(_SYNC_V0)})

# -- Heartbeat (12), LeaveGroup (13) --------------------------------------------------------
_ERROR_ONLY_V0 = Schema(("error_code", INT16_T))
_ERROR_ONLY_V1 = _throttled(_ERROR_ONLY_V0)
_ERROR_ONLY = {0: _ERROR_ONLY_V0, 1: _ERROR_ONLY_V1, 2: _ERROR_ONLY_V1}
_register(HEARTBEAT, dict.fromkeys(range(3), Schema(
    ("group_id", STRING), ("generation_id", INT32_T), ("member_id", STRING))), _ERROR_ONLY)
_register(LEAVE_GROUP, dict.fromkeys(range(3), Schema(("group_id", STRING), ("member_id", STRING))), _ERROR_ONLY)

# -- OffsetCommit (8) -----------------------------------------------------------------------
_COMMIT_PARTITION_V2 = Schema(
    ("partition_index", INT32_T), ("committed_offset", INT64_T), ("committed_metadata", NULLABLE_STRING))
_COMMIT_PARTITION_V6 = _COMMIT_PARTITION_V2.evolve(add=[("committed_leader_epoch", INT32_T, -1)],
                                                   before="committed_metadata")
_COMMIT_REQUEST_V2 = Schema(
    ("group_id", STRING),
    ("generation_id", INT32_T),  # -1 with an empty member id: a commit outside any generation
    ("member_id", STRING),
    ("retention_time_ms", INT64_T, -1),  # -1: the broker's retention
    ("topics", Array(Schema(("name", STRING), ("partitions", Array(_COMMIT_PARTITION_V2))))),
)
_COMMIT_REQUEST_V5 = _COMMIT_REQUEST_V2.evolve(drop=["retention_time_ms"])
_COMMIT_REQUEST_V6 = _COMMIT_REQUEST_V5.evolve(change={"topics": in_array({"partitions": Array(_COMMIT_PARTITION_V6)})})
_COMMIT_V2 = Schema(("topics", Array(Schema(
    ("name", STRING), ("partitions", Array(Schema(("partition_index", INT32_T), ("error_code", INT16_T))))))))
_register(OFFSET_COMMIT,
          {2: _COMMIT_REQUEST_V2, 3: _COMMIT_REQUEST_V2, 4: _COMMIT_REQUEST_V2, 5: _COMMIT_REQUEST_V5,
           6: _COMMIT_REQUEST_V6},
          {2: _COMMIT_V2, **dict.fromkeys(range(3, 7), _throttled(_COMMIT_V2))})

# -- OffsetFetch (9) ------------------------------------------------------------------------
_FETCH_OFFSETS_TOPIC = Schema(("name", STRING), ("partition_indexes", Array(INT32_T)))
_FETCH_OFFSETS_REQUEST_V1 = Schema(("group_id", STRING), ("topics", Array(_FETCH_OFFSETS_TOPIC)))
_FETCH_OFFSETS_REQUEST_V2 = Schema(("group_id", STRING), ("topics", NullableArray(_FETCH_OFFSETS_TOPIC)))  # null: all
_FETCHED_PARTITION_V1 = Schema(
    ("partition_index", INT32_T),
    ("committed_offset", INT64_T),  # -1: nothing committed
    ("metadata", NULLABLE_STRING),
    ("error_code", INT16_T),
)
_FETCHED_PARTITION_V5 = _FETCHED_PARTITION_V1.evolve(add=[("committed_leader_epoch", INT32_T, -1)],
                                                     before="metadata")
_FETCH_OFFSETS_V1 = Schema(("topics", Array(Schema(("name", STRING), ("partitions", Array(_FETCHED_PARTITION_V1))))))
_FETCH_OFFSETS_V2 = _FETCH_OFFSETS_V1.evolve(add=[("error_code", INT16_T, 0)])
_FETCH_OFFSETS_V3 = _throttled(_FETCH_OFFSETS_V2)
_FETCH_OFFSETS_V5 = _FETCH_OFFSETS_V3.evolve(change={"topics": in_array({"partitions": Array(_FETCHED_PARTITION_V5)})})
_register(OFFSET_FETCH,
          {1: _FETCH_OFFSETS_REQUEST_V1, **dict.fromkeys(range(2, 6), _FETCH_OFFSETS_REQUEST_V2)},
          {1: _FETCH_OFFSETS_V1, 2: _FETCH_OFFSETS_V2, 3: _FETCH_OFFSETS_V3, 4: _FETCH_OFFSETS_V3,
           5: _FETCH_OFFSETS_V5})

# -- DescribeGroups (15), ListGroups (16) ---------------------------------------------------
_DESCRIBE_V0 = Schema(("groups", Array(Schema(
    ("error_code", INT16_T),
    ("group_id", STRING),
    ("group_state", STRING),     # Kafka's names: Empty, PreparingRebalance, CompletingRebalance,
    ("protocol_type", STRING),   # Stable, Dead
    ("protocol_data", STRING),   # the chosen protocol (assignor) name
    ("members", Array(Schema(
        ("member_id", STRING),
        ("client_id", STRING),
        ("client_host", STRING),
        ("member_metadata", BYTES),
        ("member_assignment", BYTES),
    ))),
))))
_register(DESCRIBE_GROUPS, dict.fromkeys(range(3), Schema(("groups", Array(STRING)))),
          {0: _DESCRIBE_V0, 1: _throttled(_DESCRIBE_V0), 2: _throttled(_DESCRIBE_V0)})

_LIST_GROUPS_V0 = Schema(("error_code", INT16_T), ("groups", Array(Schema(("group_id", STRING),
                                                                          ("protocol_type", STRING)))))
_register(LIST_GROUPS, dict.fromkeys(range(3), Schema()),
          {0: _LIST_GROUPS_V0, 1: _throttled(_LIST_GROUPS_V0), 2: _throttled(_LIST_GROUPS_V0)})
