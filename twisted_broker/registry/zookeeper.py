"""The bridge between kazoo and the Twisted reactor, for the broker and the console.

kazoo is imported only inside ``registry/``: here for Twisted code, and in the blocking
wrappers (consumer_registry, zk_partition_info, cluster_view) for the thread-based clients.

kazoo has no Twisted handler: it runs callbacks on its own threads. Every result and every
watch or state event is handed to the reactor with ``reactor.callFromThread``, so the rest of
the program only ever sees Deferreds and callbacks on the reactor thread. The calls that block
in kazoo (``start``, ``stop``, ``close``) run in a thread with ``deferToThread``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure

log = logging.getLogger(__name__)

__all__ = ["ZooKeeper", "BadVersionError", "NodeExistsError", "NoNodeError", "CONNECTED", "SUSPENDED", "LOST",
           "UNAVAILABLE_ERRORS"]

CONNECTED, SUSPENDED, LOST = KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST
# What an operation fails with when ZooKeeper does not answer or refuses it (a closed
# session, a lost connection, a timeout), for callers that answer "try again later".
UNAVAILABLE_ERRORS = (KazooException, KazooTimeoutError)


class ZooKeeper:
    """A kazoo client whose results arrive as Deferreds on the reactor thread."""

    def __init__(self, hosts: str, *, reactor, session_timeout_ms: int = 6000) -> None:
        self._reactor = reactor
        # kazoo retries the connection forever in the background: ZooKeeper may come back.
        self.client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                                  connection_retry={"max_tries": -1, "max_delay": 2})
        self._state_listeners: list[Callable[[KazooState], object]] = []
        self.client.add_listener(self._on_state)

    # -- lifecycle (blocking calls go to a thread) ---------------------------------------

    def start(self, timeout_s: float) -> Deferred[None]:
        """Connect; fails with kazoo's timeout error if not connected within ``timeout_s``."""
        return self._in_thread(self.client.start, timeout_s)

    def start_blocking(self, timeout_s: float) -> None:
        """Connect before the reactor runs (twistd's privileged start). Raises on timeout."""
        self.client.start(timeout_s)

    def start_in_background(self) -> None:
        """Keep connecting without waiting; state listeners hear CONNECTED when it works."""
        self.client.start_async()

    def stop(self) -> Deferred[None]:
        """Close the session (its ephemeral nodes go at once) and the client."""
        def stop_and_close() -> None:
            self.client.stop()
            self.client.close()
        return self._in_thread(stop_and_close)

    @property
    def connected(self) -> bool:
        return self.client.connected

    @property
    def session_id(self) -> int | None:
        """This client's session id (what ZooKeeper puts in the ``ephemeralOwner`` of the
        ephemeral nodes it creates), None before the first connection."""
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def add_state_listener(self, listener: Callable[[KazooState], object]) -> None:
        """Call ``listener(state)`` on the reactor thread at each connection state change."""
        self._state_listeners.append(listener)

    def _on_state(self, state: KazooState) -> None:  # kazoo's thread; must not block
        for listener in self._state_listeners:
            self._reactor.callFromThread(listener, state)

    # -- operations ----------------------------------------------------------------------

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
               sequence: bool = False) -> Deferred[str]:
        """Create ``path`` (missing parents persistent and empty, as 0.7's ZkUtils does);
        ``sequence`` appends ZooKeeper's sequence number. Fires with the path created."""
        return self._deferred(self.client.create_async(path, value, ephemeral=ephemeral, sequence=sequence,
                                                       makepath=True))

    def set(self, path: str, value: bytes, version: int = -1) -> Deferred:
        """Set ``path``'s data; with ``version``, only if the node is still at that version
        (compare-and-set: fails with BadVersionError otherwise). Fires with the new stat."""
        return self._deferred(self.client.set_async(path, value, version))

    def get(self, path: str, watch: Callable | None = None) -> Deferred[tuple[bytes, object]]:
        return self._deferred(self.client.get_async(path, watch=self._wrap(watch)))

    def get_children(self, path: str, watch: Callable | None = None) -> Deferred[list[str]]:
        return self._deferred(self.client.get_children_async(path, watch=self._wrap(watch)))

    def exists(self, path: str, watch: Callable | None = None) -> Deferred:
        return self._deferred(self.client.exists_async(path, watch=self._wrap(watch)))

    def delete(self, path: str, version: int = -1) -> Deferred:
        """Delete ``path``; with ``version``, only if the node is still at it (BadVersionError)."""
        return self._deferred(self.client.delete_async(path, version))

    def transaction(self, ops: list[tuple]) -> Deferred[list]:
        """ZooKeeper's multi-op: every op applies, or none. Each op is one of
        ``("check", path, version)``, ``("create", path, value, ephemeral)``,
        ``("set", path, value, version)``, ``("delete", path, version)`` (version -1: any).
        Fires with the ops' results (a set's is its new stat); fails with the error of the
        first op that failed (BadVersionError, NoNodeError, NodeExistsError), so a write
        guarded by a ``check`` of another node's version is refused once that node moved
        (how a controller's writes are fenced, as KAFKA-6082 did)."""
        request = self.client.transaction()
        for op in ops:
            kind, path, *args = op
            if kind == "check":
                request.check(path, args[0])
            elif kind == "create":
                request.create(path, args[0], ephemeral=args[1])
            elif kind == "set":
                request.set_data(path, args[0], args[1])
            elif kind == "delete":
                request.delete(path, args[0])
            else:
                raise ValueError(f"unknown transaction op {kind!r}")
        return self._deferred(request.commit_async()).addCallback(_raise_first_failure)

    def _wrap(self, watch: Callable | None) -> Callable | None:
        if watch is None:
            return None
        return lambda event: self._reactor.callFromThread(watch, event)

    def _deferred(self, async_result) -> Deferred:
        deferred: Deferred = Deferred()

        def deliver(result) -> None:  # kazoo's thread
            try:
                value = result.get_nowait()
            except Exception:
                self._reactor.callFromThread(deferred.errback, Failure())
            else:
                self._reactor.callFromThread(deferred.callback, value)

        async_result.rawlink(deliver)
        return deferred

    def _in_thread(self, function: Callable, *args) -> Deferred:
        return deferToThreadPool(self._reactor, self._reactor.getThreadPool(), function, *args)


def _raise_first_failure(results: list) -> list:
    """kazoo answers a failed multi-op with one result per op: the failing op's exception,
    RolledBackError for the others."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise result
    return results
