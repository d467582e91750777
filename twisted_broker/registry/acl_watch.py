"""Every ACL of the cluster, cached in this broker's authorizer and kept current by ZooKeeper's
watches; and the compare-and-set writes of CreateAcls and DeleteAcls.

How the cache follows ZooKeeper (docs/security.md, "Caching and watches"):
1. At each connection (the first, and every one after a loss: notifications may have come
   and gone unseen meanwhile), the children of both change paths are read with a watch and
   their highest sequence numbers noted, then every ACL node is read and the authorizer's
   whole set replaced (``AclAuthorizer.load``).
2. A change watch fires: the change path's children are read again (watch set again), and
   each notification above the last one seen names a pattern, whose node is read and its
   entries replaced (``replace``). Notifications older than 15 minutes are deleted.
3. ZooKeeper down, or a read failing: the authorizer keeps what it has (the last cache);
   step 1 runs again when the session is back.

Reads are serialised: a watch that fires while one runs marks the work to be done again.
Reactor thread only; every call goes through the bridge (registry/zookeeper.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry import acl_paths
from twisted_broker.registry.followed_nodes import FollowedNodes
from twisted_broker.registry.zookeeper import (
    BadVersionError, NodeExistsError, NoNodeError, ZooKeeper,
)
from twisted_broker.security.acl import AclEntry, PatternType, ResourcePattern
from twisted_broker.security.authorizer import AclAuthorizer

log = logging.getLogger(__name__)


class AclCache(FollowedNodes):
    """Keeps ``authorizer`` holding the cluster's ACLs. ``clock`` gives the time (seconds)
    notifications are aged by; ``changes_applied`` counts patterns re-read (for tests)."""

    what_is_read = "ACLs"

    def __init__(self, zk: ZooKeeper, authorizer: AclAuthorizer, *, clock) -> None:
        super().__init__(zk)
        self.authorizer = authorizer
        self.clock = clock
        self._last_seen = dict.fromkeys(acl_paths.CHANGE_PATHS, -1)
        self.changes_applied = 0

    def _watched(self, root: str) -> Callable:
        return lambda _event: self._run(root)

    @inlineCallbacks
    def _load(self):
        for root in acl_paths.CHANGE_PATHS:
            children = yield self._children(root, watch=True)
            self._last_seen[root] = max((acl_paths.change_sequence(c) for c in children), default=-1)
        acls: dict[ResourcePattern, frozenset[AclEntry]] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for type_name in (yield self._children(acl_paths.ACL_ROOTS[pattern_type])):
                for name in (yield self._children(acl_paths.type_path(pattern_type, type_name))):
                    try:
                        pattern = acl_paths.pattern_at(pattern_type, type_name, name)
                    except ValueError as exc:
                        log.warning("ACL node %s/%s ignored: %s", type_name, name, exc)
                        continue
                    acls[pattern] = yield self._entries(pattern)
        self.authorizer.load(acls)
        log.info("loaded %d ACLs of %d resource patterns from ZooKeeper",
                 sum(map(len, acls.values())), len(acls))

    @inlineCallbacks
    def _follow(self, root: str):
        children = yield self._children(root, watch=True)
        now_ms = self.clock.seconds() * 1000
        for child in sorted(children, key=acl_paths.change_sequence):
            sequence = acl_paths.change_sequence(child)
            if sequence <= self._last_seen[root]:
                continue
            try:
                data, stat = yield self.zk.get(f"{root}/{child}")
            except NoNodeError:
                continue
            self._last_seen[root] = sequence
            try:
                pattern = acl_paths.decode_change(root, data)
            except ValueError as exc:
                log.warning("%s/%s ignored: %s", root, child, exc)
                continue
            self.authorizer.replace(pattern, (yield self._entries(pattern)))
            self.changes_applied += 1
            if now_ms - stat.ctime > acl_paths.CHANGE_EXPIRY_MS:
                self.zk.delete(f"{root}/{child}").addErrback(lambda _failure: None)  # another broker's race

    @inlineCallbacks
    def _children(self, path: str, watch: bool = False):
        try:
            return (yield self.zk.get_children(path, watch=self._watched(path) if watch else None))
        except NoNodeError:
            if not watch:
                return []
        try:  # a change path nobody wrote yet: make it, so that its children can be watched
            yield self.zk.create(path)
        except NodeExistsError:
            pass
        return (yield self.zk.get_children(path, watch=self._watched(path)))

    @inlineCallbacks
    def _entries(self, pattern: ResourcePattern):
        try:
            data, _stat = yield self.zk.get(acl_paths.acl_path(pattern))
        except NoNodeError:
            return frozenset()
        try:
            return acl_paths.decode_acls(data)
        except ValueError as exc:
            log.warning("ACLs of %s ignored: %s", pattern, exc)
            return frozenset()


@inlineCallbacks
def update_acls(zk: ZooKeeper, pattern: ResourcePattern, change: Callable[[frozenset], frozenset]):
    """Apply ``change`` (current entries -> new entries) to ``pattern``'s node by
    compare-and-set, again from a fresh read whenever another writer got there first; then
    announce it. Fires with ``(old entries, new entries)``; fails with ZooKeeper's errors."""
    path = acl_paths.acl_path(pattern)
    while True:
        try:
            data, stat = yield zk.get(path)
            current, version = acl_paths.decode_acls(data), stat.version
        except NoNodeError:
            current, version = frozenset(), None
        new = frozenset(change(current))
        if new == current:
            return current, new
        try:
            if version is None:
                yield zk.create(path, acl_paths.encode_acls(new))
            elif new:
                yield zk.set(path, acl_paths.encode_acls(new), version)
            else:
                yield zk.delete(path, version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # someone else wrote it since our read: read again
        yield zk.create(acl_paths.change_path(pattern), acl_paths.encode_change(pattern), sequence=True)
        return current, new
