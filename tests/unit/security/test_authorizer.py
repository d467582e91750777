"""The authorizer's decisions, without sockets: Kafka's resolution rules, by example and by property."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from twisted_broker.security.acl import (
    CLUSTER_NAME, AclBinding, AclBindingFilter, AclEntry, Operation, PatternType, Permission, ResourcePattern,
    ResourceType, binding_error, parse_operation, parse_resource_type, parse_super_users,
)
from twisted_broker.security.authorizer import AclAuthorizer

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
OPERATIONS = [op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]
CHECKED = [op for op in OPERATIONS if op != Operation.ALL]


def allow(principal, op, host="*"):
    return AclEntry(principal, host, op, ALLOW)


def deny(principal, op, host="*"):
    return AclEntry(principal, host, op, DENY)


def authorizer(acls=None, **options) -> AclAuthorizer:
    auth = AclAuthorizer(**options)
    auth.load(acls or {})
    return auth


def test_allowed_principal_passes_and_others_do_not():
    auth = authorizer({ResourcePattern(TOPIC, "t", LITERAL): [allow("User:alice", Operation.WRITE)]})
    assert auth.authorize("User:alice", "10.0.0.1", Operation.WRITE, TOPIC, "t")
    assert not auth.authorize("User:bob", "10.0.0.1", Operation.WRITE, TOPIC, "t")
    assert not auth.authorize("User:alice", "10.0.0.1", Operation.READ, TOPIC, "t")
    assert not auth.authorize("User:alice", "10.0.0.1", Operation.WRITE, TOPIC, "other")


def test_deny_overrides_allow_and_all():
    auth = authorizer({ResourcePattern(TOPIC, "t", LITERAL): [allow("User:*", Operation.ALL),
                                                             deny("User:bob", Operation.READ)]})
    assert auth.authorize("User:alice", "h", Operation.READ, TOPIC, "t")
    assert not auth.authorize("User:bob", "h", Operation.READ, TOPIC, "t")
    assert auth.authorize("User:bob", "h", Operation.WRITE, TOPIC, "t")


def test_deny_on_a_prefix_overrides_a_literal_allow():
    auth = authorizer({ResourcePattern(TOPIC, "logs-a", LITERAL): [allow("User:alice", Operation.WRITE)],
                       ResourcePattern(TOPIC, "logs-", PREFIXED): [deny("User:alice", Operation.WRITE)]})
    assert not auth.authorize("User:alice", "h", Operation.WRITE, TOPIC, "logs-a")


def test_implied_operations():
    auth = authorizer({ResourcePattern(TOPIC, "r", LITERAL): [allow("User:a", Operation.READ)],
                       ResourcePattern(TOPIC, "c", LITERAL): [allow("User:a", Operation.ALTER_CONFIGS)]})
    assert auth.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "r")
    assert not auth.authorize("User:a", "h", Operation.WRITE, TOPIC, "r")
    assert auth.authorize("User:a", "h", Operation.DESCRIBE_CONFIGS, TOPIC, "c")
    assert not auth.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "c")


def test_a_deny_of_read_does_not_deny_describe():  # Kafka: denies apply to the operation named
    auth = authorizer({ResourcePattern(TOPIC, "t", LITERAL): [allow("User:a", Operation.DESCRIBE),
                                                             deny("User:a", Operation.READ)]})
    assert auth.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "t")


def test_wildcard_resource_and_host():
    auth = authorizer({ResourcePattern(GROUP, "*", LITERAL): [allow("User:a", Operation.READ, host="10.0.0.2")]})
    assert auth.authorize("User:a", "10.0.0.2", Operation.READ, GROUP, "any-group")
    assert not auth.authorize("User:a", "10.0.0.3", Operation.READ, GROUP, "any-group")
    assert not auth.authorize("User:a", "10.0.0.2", Operation.READ, TOPIC, "any-group")


def test_prefixed_patterns_cover_names_starting_with_them():
    auth = authorizer({ResourcePattern(TOPIC, "team-", PREFIXED): [allow("User:a", Operation.READ)]})
    assert auth.authorize("User:a", "h", Operation.READ, TOPIC, "team-x")
    assert auth.authorize("User:a", "h", Operation.READ, TOPIC, "team-")
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "team")
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "other-team-x")


def test_many_prefixes_are_searched_by_the_names_prefixes():
    auth = authorizer({ResourcePattern(TOPIC, f"p{i}", PREFIXED): [allow("User:a", Operation.READ)]
                       for i in range(100)})
    assert auth.authorize("User:a", "h", Operation.READ, TOPIC, "p42-x")
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "q42")


def test_no_acl_found_is_closed_by_default_and_open_when_configured():
    assert not authorizer().authorize("User:a", "h", Operation.READ, TOPIC, "t")
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize("User:a", "h", Operation.READ, TOPIC, "t")
    # An ACL for someone else on the resource: ACLs are found, so the default no longer applies.
    auth = authorizer({ResourcePattern(TOPIC, "t", LITERAL): [allow("User:b", Operation.READ)]},
                      allow_everyone_if_no_acl_found=True)
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")


def test_super_users_pass_everything_even_before_loading():
    auth = AclAuthorizer(super_users=parse_super_users("User:admin; User:ops"))
    assert auth.authorize("User:ops", "h", Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
    assert not auth.authorize("User:a", "h", Operation.DESCRIBE, TOPIC, "t")
    auth.load({ResourcePattern(TOPIC, "t", LITERAL): [deny("User:admin", Operation.ALL)]})
    assert auth.authorize("User:admin", "h", Operation.READ, TOPIC, "t")


def test_not_ready_denies_even_with_allow_everyone():
    auth = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")
    auth.load({})
    assert auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")


def test_a_change_clears_cached_decisions():
    auth = authorizer()
    pattern = ResourcePattern(TOPIC, "t", LITERAL)
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")
    auth.replace(pattern, [allow("User:a", Operation.READ)])
    assert auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")
    auth.replace(pattern, [])
    assert not auth.authorize("User:a", "h", Operation.READ, TOPIC, "t")
    assert auth.acls() == []


def test_acls_filter_by_match_any_and_fields():
    auth = authorizer({ResourcePattern(TOPIC, "t", LITERAL): [allow("User:a", Operation.READ)],
                       ResourcePattern(TOPIC, "*", LITERAL): [allow("User:b", Operation.READ)],
                       ResourcePattern(TOPIC, "t", PREFIXED): [deny("User:c", Operation.WRITE)],
                       ResourcePattern(TOPIC, "x", PREFIXED): [deny("User:c", Operation.WRITE)],
                       ResourcePattern(GROUP, "t", LITERAL): [allow("User:a", Operation.READ)]})
    names = lambda bindings: sorted((b.pattern.pattern_type.name, b.pattern.name) for b in bindings)
    assert names(auth.acls(AclBindingFilter(TOPIC, "t", PatternType.MATCH))) == [
        ("LITERAL", "*"), ("LITERAL", "t"), ("PREFIXED", "t")]
    assert names(auth.acls(AclBindingFilter(TOPIC, "t", PatternType.ANY))) == [("LITERAL", "t"), ("PREFIXED", "t")]
    assert len(auth.acls()) == 5
    assert len(auth.acls(AclBindingFilter(permission=DENY))) == 2
    assert len(auth.acls(AclBindingFilter(principal="User:a", operation=Operation.READ))) == 2


def test_parsers_read_both_spellings():
    assert parse_operation("ClusterAction") is parse_operation("CLUSTER_ACTION") is Operation.CLUSTER_ACTION
    assert parse_resource_type("topic") is parse_resource_type("Topic") is TOPIC
    with pytest.raises(ValueError):
        parse_operation("Fly")


def test_binding_errors():
    ok = AclBinding(ResourcePattern(TOPIC, "t", LITERAL), allow("User:a", Operation.READ))
    assert binding_error(ok) is None
    assert binding_error(AclBinding(ResourcePattern(CLUSTER, "c", LITERAL), ok.entry))
    assert binding_error(AclBinding(ok.pattern, allow("alice", Operation.READ)))
    assert binding_error(AclBinding(ok.pattern, allow("User:a", Operation.ANY)))


# -- properties ----------------------------------------------------------------------------

principals = st.sampled_from(["User:alice", "User:bob", "User:carol", "User:*", "User:CN=broker-1"])
hosts = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
names = st.text(alphabet="ab-", min_size=1, max_size=4)
entries = st.builds(AclEntry, principals, hosts, st.sampled_from(OPERATIONS), st.sampled_from([ALLOW, DENY]))
patterns = st.builds(ResourcePattern, st.sampled_from([TOPIC, GROUP]), names, st.sampled_from([LITERAL, PREFIXED]))
acl_sets = st.dictionaries(patterns, st.frozensets(entries, min_size=1, max_size=4), max_size=6)
requests = st.tuples(st.sampled_from(["User:alice", "User:bob", "User:CN=broker-1"]),
                     st.sampled_from(["10.0.0.1", "10.0.0.2"]), st.sampled_from(CHECKED),
                     st.sampled_from([TOPIC, GROUP]), names)


def covers(pattern: ResourcePattern, rtype, name) -> bool:
    if pattern.resource_type != rtype:
        return False
    if pattern.pattern_type == LITERAL:
        return pattern.name in (name, "*")
    return name.startswith(pattern.name)


@given(acl_sets, requests, st.booleans())
def test_property_decision_is_kafkas_rule(acls, request, open_if_none):
    principal, host, op, rtype, name = request
    auth = authorizer(acls, allow_everyone_if_no_acl_found=open_if_none)
    matching = [e for p, es in acls.items() if covers(p, rtype, name) for e in es]
    mine = [e for e in matching if e.principal in (principal, "User:*") and e.host in (host, "*")]
    if any(e.permission == DENY and e.operation in (op, Operation.ALL) for e in mine):
        expected = False
    elif any(e.permission == ALLOW and (e.operation in (op, Operation.ALL) or (
            op == Operation.DESCRIBE and e.operation in (Operation.READ, Operation.WRITE, Operation.DELETE,
                                                         Operation.ALTER)) or (
            op == Operation.DESCRIBE_CONFIGS and e.operation == Operation.ALTER_CONFIGS)) for e in mine):
        expected = True
    else:
        expected = open_if_none and not matching
    assert auth.authorize(principal, host, op, rtype, name) is expected
    assert auth.authorize(principal, host, op, rtype, name) is expected  # the cached decision too


@given(acl_sets, requests)
def test_property_deny_wins(acls, request):
    principal, host, op, rtype, name = request
    acls = dict(acls)
    pattern = ResourcePattern(rtype, name, LITERAL)
    acls[pattern] = acls.get(pattern, frozenset()) | {deny(principal, op), allow(principal, Operation.ALL)}
    assert not authorizer(acls, allow_everyone_if_no_acl_found=True).authorize(principal, host, op, rtype, name)


@given(acl_sets, requests)
def test_property_super_user_passes(acls, request):
    principal, host, op, rtype, name = request
    assert authorizer(acls, super_users={principal}).authorize(principal, host, op, rtype, name)


@given(names, names, st.sampled_from(CHECKED))
def test_property_prefix_allows_exactly_the_names_it_starts(prefix, name, op):
    auth = authorizer({ResourcePattern(TOPIC, prefix, PREFIXED): [allow("User:a", Operation.ALL)]})
    assert auth.authorize("User:a", "10.0.0.1", op, TOPIC, name) is name.startswith(prefix)
