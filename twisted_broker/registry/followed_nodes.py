"""Following a ZooKeeper subtree into a broker's cache, the way the ACL and quota caches do
(acl_watch.py, quota_watch.py): everything read at each connection ("load"), then only what
the change notifications name ("follow"), one read at a time. Events that arrive while a read
runs are coalesced and run after it, a load first; ZooKeeper unreachable keeps the last cache.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry.zookeeper import CONNECTED, UNAVAILABLE_ERRORS, ZooKeeper

log = logging.getLogger(__name__)


class FollowedNodes:
    """Subclasses define ``_load()`` and ``_follow(what)`` (Deferreds) and ``what_is_read``
    (for the log line when ZooKeeper cannot be read)."""

    what_is_read = "nodes"

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        self._running = False
        self._again: set[str] = set()  # "load", or what _follow reads again

    def start(self) -> None:
        """Follow ZooKeeper from now on: load at once if connected, and at each reconnection."""
        self.zk.add_state_listener(self._on_state)
        if self.zk.connected:
            self._run("load")

    def _on_state(self, state) -> None:
        if state == CONNECTED:
            self._run("load")

    def _run(self, what: str) -> None:
        self._again.add(what)
        if not self._running:
            self._drain()

    @inlineCallbacks
    def _drain(self):
        self._running = True
        try:
            while self._again:
                what = "load" if "load" in self._again else self._again.pop()
                self._again.discard(what)
                try:
                    yield (self._load() if what == "load" else self._follow(what))
                except UNAVAILABLE_ERRORS as exc:  # kept: the last cache serves until the next connection
                    log.warning("%s not read from ZooKeeper (%s); serving the last ones read", self.what_is_read, exc)
        finally:
            self._running = False

    def _load(self):
        raise NotImplementedError

    def _follow(self, what: str):
        raise NotImplementedError
