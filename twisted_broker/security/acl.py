"""Kafka's ACL model: resource types, operations, permissions, pattern types, bindings and filters.

Pure values, no I/O. The numbers are the wire's (CreateAcls, DescribeAcls, DeleteAcls); the
names are those Kafka writes in ZooKeeper's JSON and prints (``Topic``, ``ClusterAction``,
``Allow``). ``parse_*`` read either spelling, case-insensitively (``TOPIC``, ``Topic``,
``cluster_action``, ``ClusterAction``), as Kafka's ``fromString`` do; they raise ValueError.

An ``AclBinding`` is one ACL: a ``ResourcePattern`` (type, name, LITERAL or PREFIXED) and an
``AclEntry`` (principal, host, operation, permission). An ``AclBindingFilter`` selects
bindings, as DescribeAcls and DeleteAcls (and ``twisted-broker acls --list``) ask: ANY and
None match everything; the pattern type MATCH selects the patterns that would apply to the
named resource (the literal name, the wildcard ``*`` and every covering prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name
WILDCARD = "*"  # a literal pattern's name (every resource of its type), an ACL's host
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"

# The names Kafka writes in ZooKeeper's JSON and paths (SecurityUtils' camel case).
RESOURCE_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                       ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                       ResourceType.DELEGATION_TOKEN: "DelegationToken"}
OPERATION_NAMES = {
    Operation.ALL: "All", Operation.READ: "Read", Operation.WRITE: "Write", Operation.CREATE: "Create",
    Operation.DELETE: "Delete", Operation.ALTER: "Alter", Operation.DESCRIBE: "Describe",
    Operation.CLUSTER_ACTION: "ClusterAction", Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.ALTER_CONFIGS: "AlterConfigs", Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}

# Kafka's implied operations: an Allow of any operation on the right grants the one on the left.
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


def _parser(enum: type[IntEnum], names: dict):
    by_name = {}
    for member in enum:
        by_name[member.name.lower()] = by_name[member.name.replace("_", "").lower()] = member
    for member, name in names.items():
        by_name[name.lower()] = member

    def parse(text: str):
        try:
            return by_name[text.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown {enum.__name__} {text!r}") from None
    return parse


parse_resource_type = _parser(ResourceType, RESOURCE_TYPE_NAMES)
parse_operation = _parser(Operation, OPERATION_NAMES)
parse_permission = _parser(Permission, PERMISSION_NAMES)
parse_pattern_type = _parser(PatternType, {})


def principal_error(principal: str) -> str | None:
    """Why ``principal`` is no valid ACL principal (``Type:name``), or None."""
    kind, sep, name = principal.partition(":")
    return None if sep and kind and name else f"principal {principal!r} is not Type:name (User:alice)"


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED

    def __str__(self) -> str:
        return f"{RESOURCE_TYPE_NAMES.get(self.resource_type, self.resource_type.name)}:" \
               f"{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AclEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"{self.principal} has {PERMISSION_NAMES[self.permission]} permission for operation "
                f"{OPERATION_NAMES[self.operation]} from host {self.host}")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry


def binding_error(binding: AclBinding) -> str | None:
    """Why ``binding`` cannot be stored (Kafka's INVALID_REQUEST cases), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type not in RESOURCE_TYPE_NAMES:
        return f"resource type {pattern.resource_type.name} cannot carry ACLs"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {pattern.pattern_type.name} is not LITERAL or PREFIXED"
    if not pattern.name:
        return "empty resource name"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}"
    if pattern.pattern_type == PatternType.PREFIXED and pattern.name == WILDCARD:
        return "a prefixed pattern cannot be the wildcard"
    if entry.operation not in OPERATION_NAMES or entry.permission not in PERMISSION_NAMES:
        return "operation and permission must be specific (not ANY or UNKNOWN)"
    if not entry.host:
        return "empty host"
    return principal_error(entry.principal)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Selects bindings; None and ANY match anything (Kafka's AclBindingFilter)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and pattern.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type == PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD)
            return pattern.pattern_type == PatternType.PREFIXED and self.name.startswith(pattern.name)
        if self.pattern_type != PatternType.ANY and pattern.pattern_type != self.pattern_type:
            return False
        return self.name is None or pattern.name == self.name

    def matches_entry(self, entry: AclEntry) -> bool:
        return ((self.principal is None or entry.principal == self.principal)
                and (self.host is None or entry.host == self.host)
                and self.operation in (Operation.ANY, entry.operation)
                and self.permission in (Permission.ANY, entry.permission))


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:a;User:b``)."""
    return frozenset(part.strip() for part in text.split(";") if part.strip())
