"""The ACL authorizer: Kafka's AclAuthorizer decisions over ACLs held in memory (pure: no I/O).

How a decision is made (docs/security.md, "How a request is decided"): a super user passes;
else the ACLs that match are those of the resource's type whose pattern covers the name (the
literal name, the wildcard ``*``, each PREFIXED pattern the name starts with), for the
request's principal or ``User:*``, from its host or ``*``. A matching Deny of the operation
(or All) refuses; a matching Allow of the operation, of All, or of an operation implying it
(acl.IMPLIED_BY) allows; no ACL at all on the resource leaves it to
``allow.everyone.if.no.acl.found``; otherwise refused.

Speed: ACLs are indexed by (type, literal name) and, per type, by prefix; a name's prefixes
are looked up one dict probe each, so a decision touches only its resource's ACLs however
many there are. Decisions are cached by (principal, host, operation, type, name) until the
next change of any ACL (``replace``), and the cache is bounded. Reactor thread only: the
ACL cache (registry/acl_watch.py) calls ``replace`` and ``load``; the handlers ``authorize``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from twisted_broker.security.acl import (
    IMPLIED_BY, WILDCARD, WILDCARD_PRINCIPAL, AclBinding, AclBindingFilter, AclEntry, Operation, PatternType,
    Permission, ResourcePattern, ResourceType,
)

DECISIONS_KEPT = 100_000  # cached decisions at most; past it the cache starts again empty

# The operations whose Allow grants each operation: itself, All, and those implying it.
_GRANTED_BY = {op: frozenset({op, Operation.ALL, *IMPLIED_BY.get(op, ())}) for op in Operation}
_DENIED_BY = {op: frozenset({op, Operation.ALL}) for op in Operation}


class AclAuthorizer:
    """Decides requests against the ACLs it holds. ``ready`` is False until the first
    ``load``: until then only super users pass (a broker that has not read ZooKeeper yet
    knows no ACL, and must not take that for "no ACL found")."""

    def __init__(self, *, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.ready = False
        self._literal: dict[tuple[ResourceType, str], frozenset[AclEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AclEntry]]] = {}
        self._decisions: dict[tuple, bool] = {}

    # -- the ACLs ------------------------------------------------------------------------------

    def load(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Hold exactly ``acls`` (every pattern's entries), forgetting all others."""
        self._literal, self._prefixed = {}, {}
        for pattern, entries in acls.items():
            self._put(pattern, frozenset(entries))
        self._decisions = {}
        self.ready = True

    def replace(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> None:
        """Hold ``entries`` as ``pattern``'s ACLs (none: the pattern goes)."""
        self._put(pattern, frozenset(entries))
        self._decisions = {}

    def _put(self, pattern: ResourcePattern, entries: frozenset[AclEntry]) -> None:
        if pattern.pattern_type == PatternType.LITERAL:
            table, key = self._literal, (pattern.resource_type, pattern.name)
        else:
            table, key = self._prefixed.setdefault(pattern.resource_type, {}), pattern.name
        if entries:
            table[key] = entries
        else:
            table.pop(key, None)

    def acls(self, selected: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """Every ACL held that ``selected`` matches, ordered by pattern."""
        found = []
        patterns = [ResourcePattern(rtype, name, PatternType.LITERAL) for rtype, name in self._literal]
        patterns += [ResourcePattern(rtype, name, PatternType.PREFIXED)
                     for rtype, table in self._prefixed.items() for name in table]
        for pattern in sorted(patterns, key=lambda p: (p.resource_type, p.pattern_type, p.name)):
            if not selected.matches_pattern(pattern):
                continue
            for entry in sorted(self.entries(pattern), key=lambda e: (e.principal, e.host, e.operation, e.permission)):
                if selected.matches_entry(entry):
                    found.append(AclBinding(pattern, entry))
        return found

    def entries(self, pattern: ResourcePattern) -> frozenset[AclEntry]:
        if pattern.pattern_type == PatternType.LITERAL:
            return self._literal.get((pattern.resource_type, pattern.name), frozenset())
        return self._prefixed.get(pattern.resource_type, {}).get(pattern.name, frozenset())

    # -- decisions -----------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """May ``principal`` from ``host`` (an IP address) do ``operation`` on the resource?"""
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= DECISIONS_KEPT:
                self._decisions = {}
            self._decisions[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        if not self.ready:
            return False
        sets = self._matching(resource_type, name)
        if not sets:
            return self.allow_everyone_if_no_acl_found
        denied_by, granted_by = _DENIED_BY[operation], _GRANTED_BY[operation]
        allowed = False
        for entries in sets:
            for entry in entries:
                if entry.principal not in (principal, WILDCARD_PRINCIPAL) or entry.host not in (host, WILDCARD):
                    continue
                if entry.permission == Permission.DENY:
                    if entry.operation in denied_by:
                        return False  # Deny wins, whatever else allows
                elif entry.operation in granted_by:
                    allowed = True
        return allowed

    def _matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AclEntry]]:
        """The entry sets of every pattern covering the resource."""
        literal = self._literal
        sets = [found for found in (literal.get((resource_type, name)), literal.get((resource_type, WILDCARD)))
                if found]
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            if len(prefixed) < len(name):
                sets += [entries for prefix, entries in prefixed.items() if name.startswith(prefix)]
            else:
                sets += [prefixed[name[:end]] for end in range(1, len(name) + 1) if name[:end] in prefixed]
        return sets
