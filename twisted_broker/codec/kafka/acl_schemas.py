"""Schemas of the ACL APIs: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v0 and v1
(Kafka 2.1 layouts, non-flexible encodings). v1 adds the pattern type after each resource
name (v0's are LITERAL). Field names are Kafka's message specs' names in snake case; the
enumerations' numbers are security/acl.py's (resource type, operation, permission, pattern type).
"""

from __future__ import annotations

from twisted_broker.codec.kafka.api_keys import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from twisted_broker.codec.kafka.primitives import INT8_T, INT16_T, INT32_T, NULLABLE_STRING, STRING, Array
from twisted_broker.codec.kafka.schema import Schema

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}

LITERAL_PATTERN = 3  # what v0 means: acl.PatternType.LITERAL


def _with_pattern(schema: Schema, field: str, after: str) -> Schema:
    """``schema`` with the v1 pattern type field ``field`` inserted after ``after``."""
    names = schema.names
    following = names[names.index(after) + 1]
    return schema.evolve(add=[(field, INT8_T, LITERAL_PATTERN)], before=following)


_ERROR = (("error_code", INT16_T), ("error_message", NULLABLE_STRING))
_ENTRY = (("principal", STRING), ("host", STRING), ("operation", INT8_T), ("permission_type", INT8_T))
_FILTER = (("resource_type_filter", INT8_T), ("resource_name_filter", NULLABLE_STRING),
           ("principal_filter", NULLABLE_STRING), ("host_filter", NULLABLE_STRING), ("operation", INT8_T),
           ("permission_type", INT8_T))

# -- DescribeAcls (29) ----------------------------------------------------------------------
_DESCRIBE_REQUEST_V0 = Schema(*_FILTER)
_DESCRIBE_REQUEST_V1 = _with_pattern(_DESCRIBE_REQUEST_V0, "pattern_type_filter", "resource_name_filter")
_DESCRIBED_V0 = Schema(("resource_type", INT8_T), ("resource_name", STRING),
                       ("acls", Array(Schema(*_ENTRY))))
_DESCRIBED_V1 = _with_pattern(_DESCRIBED_V0, "pattern_type", "resource_name")
for _v, _request, _resource in [(0, _DESCRIBE_REQUEST_V0, _DESCRIBED_V0), (1, _DESCRIBE_REQUEST_V1, _DESCRIBED_V1)]:
    REQUESTS[DESCRIBE_ACLS, _v] = _request
    RESPONSES[DESCRIBE_ACLS, _v] = Schema(("throttle_time_ms", INT32_T, 0), *_ERROR, ("resources", Array(_resource)))

# -- CreateAcls (30) ------------------------------------------------------------------------
_CREATION_V0 = Schema(("resource_type", INT8_T), ("resource_name", STRING), *_ENTRY)
_CREATION_V1 = _with_pattern(_CREATION_V0, "resource_pattern_type", "resource_name")
_CREATE_V0 = Schema(("throttle_time_ms", INT32_T, 0), ("results", Array(Schema(*_ERROR))))
for _v, _creation in [(0, _CREATION_V0), (1, _CREATION_V1)]:
    REQUESTS[CREATE_ACLS, _v] = Schema(("creations", Array(_creation)))
    RESPONSES[CREATE_ACLS, _v] = _CREATE_V0

# -- DeleteAcls (31) ------------------------------------------------------------------------
_DELETE_FILTER_V0 = Schema(*_FILTER)
_DELETE_FILTER_V1 = _with_pattern(_DELETE_FILTER_V0, "pattern_type_filter", "resource_name_filter")
_MATCHING_V0 = Schema(*_ERROR, ("resource_type", INT8_T), ("resource_name", STRING), *_ENTRY)
_MATCHING_V1 = _with_pattern(_MATCHING_V0, "pattern_type", "resource_name")
for _v, _filter, _matching in [(0, _DELETE_FILTER_V0, _MATCHING_V0), (1, _DELETE_FILTER_V1, _MATCHING_V1)]:
    REQUESTS[DELETE_ACLS, _v] = Schema(("filters", Array(_filter)))
    RESPONSES[DELETE_ACLS, _v] = Schema(("throttle_time_ms", INT32_T, 0), ("filter_results", Array(Schema(
        *_ERROR, ("matching_acls", Array(_matching))))))
