"""The ACLs' ZooKeeper paths and values, exactly as Kafka's AclAuthorizer keeps them. Pure: no I/O.

=====================================================  ============================================
``/kafka-acl/<Type>/<name>``                           a literal pattern's ACLs, JSON below
``/kafka-acl-extended/prefixed/<Type>/<name>``         a prefixed pattern's ACLs, the same JSON
``/kafka-acl-changes/acl_changes_<seq>``               a literal pattern changed: ``TOPIC:<name>``
``/kafka-acl-extended-changes/acl_changes_<seq>``      a prefixed one: ``{"version":1,"resourceType":
                                                       "TOPIC","name":...,"patternType":"PREFIXED"}``
=====================================================  ============================================

An ACL node's value: ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Read","host":"*"}]}`` (names as acl.py's *_NAMES). ``<Type>`` is ``Topic``,
``Group``, ``Cluster``, ``TransactionalId``; ``<seq>`` ZooKeeper's sequence suffix. Decoders
raise ValueError for a value they cannot read.
"""

from __future__ import annotations

import json

from twisted_broker.security.acl import (
    OPERATION_NAMES, PERMISSION_NAMES, RESOURCE_TYPE_NAMES, AclEntry, PatternType, ResourcePattern,
    parse_operation, parse_pattern_type, parse_permission, parse_resource_type,
)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
ACL_ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
CHANGE_PATHS = (LITERAL_CHANGES, EXTENDED_CHANGES)
CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's: notifications older than this are deleted


def acl_path(pattern: ResourcePattern) -> str:
    return f"{ACL_ROOTS[pattern.pattern_type]}/{RESOURCE_TYPE_NAMES[pattern.resource_type]}/{pattern.name}"


def type_path(pattern_type: PatternType, type_name: str) -> str:
    return f"{ACL_ROOTS[pattern_type]}/{type_name}"


def pattern_at(pattern_type: PatternType, type_name: str, name: str) -> ResourcePattern:
    """The pattern a node under ``ACL_ROOTS[pattern_type]/<type_name>/<name>`` holds."""
    return ResourcePattern(parse_resource_type(type_name), name, pattern_type)


def encode_acls(entries) -> bytes:
    acls = [{"principal": e.principal, "permissionType": PERMISSION_NAMES[e.permission],
             "operation": OPERATION_NAMES[e.operation], "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes) -> frozenset[AclEntry]:
    """An ACL node's entries; empty data (a node written by nobody yet) holds none."""
    if not data:
        return frozenset()
    try:
        value = json.loads(data)
        return frozenset(AclEntry(acl["principal"], acl["host"], parse_operation(acl["operation"]),
                                  parse_permission(acl["permissionType"])) for acl in value["acls"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"ACL node value {data[:200]!r}: {exc}") from None


def change_path(pattern: ResourcePattern) -> str:
    """Where a change of ``pattern`` is announced (a sequential node is created under it)."""
    root = LITERAL_CHANGES if pattern.pattern_type == PatternType.LITERAL else EXTENDED_CHANGES
    return f"{root}/{CHANGE_PREFIX}"


def encode_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return json.dumps({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                       "patternType": pattern.pattern_type.name}, separators=(",", ":")).encode()


def decode_change(root: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under ``root`` (one of CHANGE_PATHS) names."""
    try:
        if root == LITERAL_CHANGES:
            type_name, sep, name = data.decode().partition(":")
            if not sep:
                raise ValueError("not ResourceType:name")
            return ResourcePattern(parse_resource_type(type_name), name, PatternType.LITERAL)
        value = json.loads(data)
        return ResourcePattern(parse_resource_type(value["resourceType"]), value["name"],
                               parse_pattern_type(value["patternType"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"ACL change notification {data[:200]!r}: {exc}") from None


def change_sequence(child: str) -> int:
    """The sequence number of a notification node's name (-1 for a name that is not one)."""
    suffix = child[len(CHANGE_PREFIX):] if child.startswith(CHANGE_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else -1
