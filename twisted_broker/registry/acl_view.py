"""AclView: the ACLs in ZooKeeper for ``twisted-broker acls``, blocking (tools run no reactor).

The same nodes, values and compare-and-set rule as the brokers' writes
(registry/acl_watch.py's ``update_acls``), through a plain kazoo client: read the pattern's
node and version, write the new set only at that version (create it if absent, delete it
when its last ACL goes), read again when another writer got there first, then add the change
notification every broker watches. ZooKeeper that cannot be reached raises
ZooKeeperUnavailable (cluster_view.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from twisted_broker.registry import acl_paths
from twisted_broker.registry.cluster_view import ZooKeeperUnavailable
from twisted_broker.security.acl import AclEntry, PatternType, ResourcePattern


class AclView:
    """A connected session on ``zk_connect``; close it (or use it as a context manager)."""

    def __init__(self, zk_connect: str, *, timeout_s: float = 10.0) -> None:
        self._client = KazooClient(hosts=zk_connect, timeout=6.0)
        try:
            self._client.start(timeout_s)
        except (KazooTimeoutError, KazooException, ValueError) as exc:
            self._client.close()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {zk_connect} within {timeout_s:g} s "
                                       f"({exc or type(exc).__name__})") from None

    def close(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    def __enter__(self) -> "AclView":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        """Every pattern with ACLs, and its entries. Raises ValueError for a node that does not parse."""
        found = {}
        try:
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                for type_name in self._children(acl_paths.ACL_ROOTS[pattern_type]):
                    for name in self._children(acl_paths.type_path(pattern_type, type_name)):
                        pattern = acl_paths.pattern_at(pattern_type, type_name, name)
                        entries = self._entries(pattern)[0]
                        if entries:
                            found[pattern] = entries
        except (KazooTimeoutError, KazooException) as exc:
            raise ZooKeeperUnavailable(f"reading ACLs: {exc or type(exc).__name__}") from None
        return found

    def update(self, pattern: ResourcePattern, change: Callable[[frozenset], frozenset]):
        """Apply ``change`` to ``pattern``'s entries by compare-and-set; ``(old, new)``."""
        path = acl_paths.acl_path(pattern)
        try:
            while True:
                current, version = self._entries(pattern)
                new = frozenset(change(current))
                if new == current:
                    return current, new
                try:
                    if version is None:
                        self._client.create(path, acl_paths.encode_acls(new), makepath=True)
                    elif new:
                        self._client.set(path, acl_paths.encode_acls(new), version)
                    else:
                        self._client.delete(path, version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                self._client.create(acl_paths.change_path(pattern), acl_paths.encode_change(pattern),
                                    sequence=True, makepath=True)
                return current, new
        except (KazooTimeoutError, KazooException) as exc:
            raise ZooKeeperUnavailable(f"writing ACLs of {pattern}: {exc or type(exc).__name__}") from None

    def _children(self, path: str) -> list[str]:
        try:
            return self._client.get_children(path)
        except NoNodeError:
            return []

    def _entries(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int | None]:
        try:
            data, stat = self._client.get(acl_paths.acl_path(pattern))
        except NoNodeError:
            return frozenset(), None
        return acl_paths.decode_acls(data), stat.version
