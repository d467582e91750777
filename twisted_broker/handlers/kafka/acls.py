"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) of the modern listener (docs/security.md).

DescribeAcls answers from this broker's cache of every ACL (registry/acl_watch.py); CreateAcls
and DeleteAcls write ZooKeeper by compare-and-set (``update_acls``), then put the pattern's
new entries in this broker's authorizer at once (the other brokers hear of it through the
change notification), so a describe right after a create sees it. Whether the principal may
manage ACLs at all is checked before (handlers/kafka/authorization.py: Describe or Alter on the
cluster). With the authorizer off every request is answered 54 SECURITY_DISABLED, as Kafka's.

Errors: a creation or filter that cannot be (an unknown enumeration, a cluster not named
``kafka-cluster``, a principal not ``Type:name``) 42 INVALID_REQUEST with the reason;
ZooKeeper not answering -1 with its message, nothing written for that pattern.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import inlineCallbacks

from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.registry.acl_watch import update_acls
from twisted_broker.registry.zookeeper import UNAVAILABLE_ERRORS
from twisted_broker.security.acl import (
    AclBinding, AclBindingFilter, AclEntry, Operation, PatternType, Permission, ResourcePattern, ResourceType,
    binding_error,
)
from twisted_broker.security.authorizer import AclAuthorizer

log = logging.getLogger(__name__)

LITERAL = int(PatternType.LITERAL)  # v0 requests carry no pattern type: literal
DISABLED_MESSAGE = "no authorizer is configured on the broker (authorizer.class.name)"


def _enum(kind, value: int):
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def binding_of(creation: dict) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, creation["resource_type"]), creation["resource_name"],
                        _enum(PatternType, creation.get("resource_pattern_type", LITERAL))),
        AclEntry(creation["principal"], creation["host"], _enum(Operation, creation["operation"]),
                 _enum(Permission, creation["permission_type"])))


def filter_of(asked: dict) -> AclBindingFilter:
    """A DescribeAcls request's or a DeleteAcls filter's selection (the two have one layout)."""
    return AclBindingFilter(
        _enum(ResourceType, asked["resource_type_filter"]), asked["resource_name_filter"],
        _enum(PatternType, asked.get("pattern_type_filter", LITERAL)), asked["principal_filter"],
        asked["host_filter"], _enum(Operation, asked["operation"]), _enum(Permission, asked["permission_type"]))


def filter_error(selected: AclBindingFilter) -> str | None:
    unknown = [name for name, value in [("resource type", selected.resource_type),
                                         ("pattern type", selected.pattern_type), ("operation", selected.operation),
                                         ("permission", selected.permission)] if value == 0]
    return f"unknown {', '.join(unknown)}" if unknown else None


def _binding_fields(binding: AclBinding) -> dict:
    pattern, entry = binding.pattern, binding.entry
    return {"resource_type": int(pattern.resource_type), "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type), "principal": entry.principal, "host": entry.host,
            "operation": int(entry.operation), "permission_type": int(entry.permission)}


class AclRequests:
    """The ACL APIs of one broker: ``authorizer`` None when it is off; ``zk`` its bridge."""

    def __init__(self, authorizer: AclAuthorizer | None, zk) -> None:
        self.authorizer = authorizer
        self.zk = zk

    def describe_acls(self, request: Request) -> dict:
        answer = {"throttle_time_ms": 0, "error_code": kafka_errors.NONE, "error_message": None, "resources": []}
        if self.authorizer is None:
            return {**answer, "error_code": kafka_errors.SECURITY_DISABLED, "error_message": DISABLED_MESSAGE}
        selected = filter_of(request.body)
        if (error := filter_error(selected)) is not None:
            return {**answer, "error_code": kafka_errors.INVALID_REQUEST, "error_message": error}
        by_pattern: dict[ResourcePattern, list] = {}
        for binding in self.authorizer.acls(selected):
            entry = binding.entry
            by_pattern.setdefault(binding.pattern, []).append(
                {"principal": entry.principal, "host": entry.host, "operation": int(entry.operation),
                 "permission_type": int(entry.permission)})
        answer["resources"] = [{"resource_type": int(p.resource_type), "resource_name": p.name,
                                "pattern_type": int(p.pattern_type), "acls": acls} for p, acls in by_pattern.items()]
        return answer

    @inlineCallbacks
    def create_acls(self, request: Request):
        creations = request.body["creations"]
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "results": [
                {"error_code": kafka_errors.SECURITY_DISABLED, "error_message": DISABLED_MESSAGE}] * len(creations)}
        results: list[dict] = []
        adding: dict[ResourcePattern, list[tuple[AclEntry, dict]]] = {}
        for creation in creations:
            binding = binding_of(creation)
            result = {"error_code": kafka_errors.NONE, "error_message": None}
            results.append(result)
            if (error := binding_error(binding)) is not None:
                result.update(error_code=kafka_errors.INVALID_REQUEST, error_message=error)
            else:
                adding.setdefault(binding.pattern, []).append((binding.entry, result))
        for pattern, entries in adding.items():
            new = {entry for entry, _ in entries}
            try:
                _old, now = yield update_acls(self.zk, pattern, lambda current: current | new)
            except UNAVAILABLE_ERRORS as exc:
                log.warning("CreateAcls of %s failed: %s", pattern, exc)
                for _, result in entries:
                    result.update(error_code=kafka_errors.UNKNOWN_SERVER_ERROR, error_message=f"ZooKeeper: {exc}")
                continue
            self.authorizer.replace(pattern, now)
            log.info("ACLs added for %s by %s: %s", pattern, request.principal, "; ".join(map(str, new)))
        return {"throttle_time_ms": 0, "results": results}

    @inlineCallbacks
    def delete_acls(self, request: Request):
        filters = request.body["filters"]
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": kafka_errors.SECURITY_DISABLED, "error_message": DISABLED_MESSAGE,
                 "matching_acls": []}] * len(filters)}
        answers = []
        for asked in filters:
            selected = filter_of(asked)
            answer = {"error_code": kafka_errors.NONE, "error_message": None, "matching_acls": []}
            answers.append(answer)
            if (error := filter_error(selected)) is not None:
                answer.update(error_code=kafka_errors.INVALID_REQUEST, error_message=error)
                continue
            patterns = dict.fromkeys(binding.pattern for binding in self.authorizer.acls(selected))
            for pattern in patterns:
                if not selected.matches_pattern(pattern):
                    continue
                try:
                    old, now = yield update_acls(self.zk, pattern, lambda current: frozenset(
                        entry for entry in current if not selected.matches_entry(entry)))
                except UNAVAILABLE_ERRORS as exc:
                    log.warning("DeleteAcls of %s failed: %s", pattern, exc)
                    answer.update(error_code=kafka_errors.UNKNOWN_SERVER_ERROR, error_message=f"ZooKeeper: {exc}")
                    break
                self.authorizer.replace(pattern, now)
                for entry in sorted(old - now, key=lambda e: (e.principal, e.host, e.operation, e.permission)):
                    answer["matching_acls"].append({"error_code": kafka_errors.NONE, "error_message": None,
                                                    **_binding_fields(AclBinding(pattern, entry))})
                if old - now:
                    log.info("ACLs removed from %s by %s: %s", pattern, request.principal,
                             "; ".join(map(str, old - now)))
        return {"throttle_time_ms": 0, "filter_results": answers}
