"""``acls``: add, remove and list the ACLs in ZooKeeper, in the manner of Kafka's kafka-acls.

The nodes and values are Kafka's AclAuthorizer's (registry/acl_paths.py), written by
compare-and-set with a change notification (registry/acl_view.py), so every broker's cache
sees a change within moments, and Kafka's own tools read what this one writes::

    twisted-broker acls --add --allow-principal User:alice --operation Read --topic t --group g
    twisted-broker acls --add --deny-principal User:bob --operation Write --topic logs- \\
        --resource-pattern-type prefixed
    twisted-broker acls --remove --allow-principal User:alice --operation Read --topic t
    twisted-broker acls --list [--topic t | --group g | --cluster] [--principal User:alice]

``--add`` writes one ACL per (resource, principal, operation, host); ``--remove`` removes
those it names, or with no principal or operation every ACL of the resources named (as
kafka-acls removes all with ``--remove --topic t``); ``--list`` prints one line per ACL.
Output: the ACLs added, removed or listed, by resource pattern.
"""

from __future__ import annotations

import argparse

from twisted_broker.registry.acl_view import AclView
from twisted_broker.security.acl import (
    CLUSTER_NAME, OPERATION_NAMES, RESOURCE_TYPE_NAMES, AclBinding, AclBindingFilter, AclEntry, Operation,
    PatternType, Permission, ResourcePattern, ResourceType, binding_error, parse_operation,
)
from twisted_broker.tools import cluster
from twisted_broker.tools.errors import CommandError, UsageError

HELP = "add, remove or list ACLs in ZooKeeper (kafka-acls)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster.add_cluster_arguments(parser, allow_broker_list=False)
    parser.add_argument("--zookeeper", dest="zk", type=cluster.zk_connect, metavar="HOST:PORT[,...]",
                        help="the same as --zk (kafka-acls' name)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described")
    action.add_argument("--remove", action="store_true", help="remove the ACLs described")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources named, else all)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="P", help="User:name (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="P", help="User:name (repeatable)")
    parser.add_argument("--principal", metavar="P", help="--list: only this principal's ACLs")
    parser.add_argument("--operation", action="append", default=[], type=_operation, metavar="OP",
                        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                             "AlterConfigs, IdempotentWrite, All (repeatable)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="IP", help="default *")
    parser.add_argument("--deny-host", action="append", default=[], metavar="IP", help="default *")
    parser.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (repeatable; * all)")
    parser.add_argument("--group", action="append", default=[], metavar="G", help="a group (repeatable; * all)")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default="literal", choices=["literal", "prefixed", "any", "match"],
                        help="literal (default) or prefixed; --list and --remove also any or match")


def _operation(text: str) -> Operation:
    try:
        operation = parse_operation(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}") from None
    if operation not in OPERATION_NAMES:
        raise argparse.ArgumentTypeError(f"{text!r} is not an operation an ACL can name")
    return operation


def _resources(args) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, name) for name in args.topic] + [(ResourceType.GROUP, name) for name in args.group]
            + [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else []))


def _entries(args) -> list[AclEntry]:
    entries = []
    for principals, hosts, permission in [(args.allow_principal, args.allow_host, Permission.ALLOW),
                                          (args.deny_principal, args.deny_host, Permission.DENY)]:
        for principal in principals:
            for host in hosts or ["*"]:
                entries += [AclEntry(principal, host, op, permission) for op in args.operation]
    return entries


def run(args: argparse.Namespace) -> int:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    resources = _resources(args)
    with AclView(args.zk) as view:
        if args.list:
            return _list(view, resources, pattern_type, args.principal)
        if not resources:
            raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
        if args.add:
            return _add(view, resources, pattern_type, args)
        return _remove(view, resources, pattern_type, args)


def _add(view: AclView, resources, pattern_type: PatternType, args) -> int:
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    entries = _entries(args)
    if not entries:
        raise UsageError("--add needs --allow-principal or --deny-principal, and --operation")
    for resource_type, name in resources:
        pattern = ResourcePattern(resource_type, name, pattern_type)
        for entry in entries:
            if (error := binding_error(AclBinding(pattern, entry))) is not None:
                raise UsageError(error)
        _old, new = view.update(pattern, lambda current: current | set(entries))
        _print(f"Current ACLs for resource `{pattern}`:", new)
    return 0


def _remove(view: AclView, resources, pattern_type: PatternType, args) -> int:
    entries = set(_entries(args))
    everything = not args.allow_principal and not args.deny_principal and not args.operation
    if not entries and not everything:
        raise UsageError("--remove needs --allow-principal or --deny-principal with --operation, or neither")
    for resource_type, name in resources:
        selected = AclBindingFilter(resource_type, name, pattern_type)
        for pattern in [p for p in view.all_acls() if selected.matches_pattern(p)]:
            old, new = view.update(pattern, lambda current: frozenset() if everything else current - entries)
            _print(f"Removed from resource `{pattern}`:", old - new)
    return 0


def _list(view: AclView, resources, pattern_type: PatternType, principal: str | None) -> int:
    if pattern_type == PatternType.LITERAL and not resources:
        pattern_type = PatternType.ANY  # a bare --list shows every ACL
    filters = [AclBindingFilter(rtype, name, pattern_type, principal) for rtype, name in resources] or [
        AclBindingFilter(pattern_type=pattern_type, principal=principal)]
    try:
        acls = view.all_acls()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    for pattern in sorted(acls, key=lambda p: (RESOURCE_TYPE_NAMES[p.resource_type], p.pattern_type, p.name)):
        shown = {e for e in acls[pattern] if any(f.matches(AclBinding(pattern, e)) for f in filters)}
        if shown:
            _print(f"Current ACLs for resource `{pattern}`:", shown)
    return 0


def _print(title: str, entries) -> None:
    print(title)
    for entry in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission)):
        print(f"\t{entry}")
    print()
