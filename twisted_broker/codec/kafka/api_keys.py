"""The API keys of the Kafka protocol this broker serves, and the versions of each.

``SUPPORTED`` is what ApiVersions answers and what the listener accepts: Kafka 2.1's level
with non-flexible encodings only (docs/kafka-protocol.md says why each range). A request
outside it is answered UNSUPPORTED_VERSION (ApiVersions) or closes the connection (others).
"""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22
SASL_AUTHENTICATE = 36
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

API_NAMES: dict[int, str] = {
    PRODUCE: "Produce", FETCH: "Fetch", LIST_OFFSETS: "ListOffsets", METADATA: "Metadata",
    OFFSET_COMMIT: "OffsetCommit", OFFSET_FETCH: "OffsetFetch",
    FIND_COORDINATOR: "FindCoordinator", JOIN_GROUP: "JoinGroup", HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup", SYNC_GROUP: "SyncGroup", DESCRIBE_GROUPS: "DescribeGroups",
    LIST_GROUPS: "ListGroups", API_VERSIONS: "ApiVersions", CREATE_TOPICS: "CreateTopics",
    DELETE_TOPICS: "DeleteTopics", INIT_PRODUCER_ID: "InitProducerId",
    SASL_HANDSHAKE: "SaslHandshake", SASL_AUTHENTICATE: "SaslAuthenticate", DESCRIBE_ACLS: "DescribeAcls",
    CREATE_ACLS: "CreateAcls", DELETE_ACLS: "DeleteAcls",
}

# api_key -> (min_version, max_version), both inclusive.
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 7),
    FETCH: (4, 10),
    LIST_OFFSETS: (1, 4),
    METADATA: (0, 7),
    OFFSET_COMMIT: (2, 6),
    OFFSET_FETCH: (1, 5),
    FIND_COORDINATOR: (0, 2),
    JOIN_GROUP: (0, 3),
    HEARTBEAT: (0, 2),
    LEAVE_GROUP: (0, 2),
    SYNC_GROUP: (0, 2),
    DESCRIBE_GROUPS: (0, 2),
    LIST_GROUPS: (0, 2),
    API_VERSIONS: (0, 2),
    CREATE_TOPICS: (0, 3),
    DELETE_TOPICS: (0, 3),
    INIT_PRODUCER_ID: (0, 1),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 1),
    DESCRIBE_ACLS: (0, 1),
    CREATE_ACLS: (0, 1),
    DELETE_ACLS: (0, 1),
}


def is_supported(api_key: int, api_version: int) -> bool:
    versions = SUPPORTED.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]
