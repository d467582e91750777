"""A consumer group member's ZooKeeper session, for the blocking (thread-based) consumer.

The ZooKeeper consumer connector (client/zookeeper_consumer.py) runs on threads, as 0.7's
does, so it does not use the Twisted bridge in zookeeper.py: this class makes blocking kazoo
calls from the caller's thread and hides kazoo behind plain values and one exception,
RegistryError. Every call waits at most ``request_timeout_ms``.

Watches and session events become calls of ``on_event(kind)`` on kazoo's threads (the
callback must only record the event and wake someone; it must not block):

- ``CHANGED``: a watched child list changed (group members, a topic's brokers, the topics);
- ``RECONNECTED``: the connection came back. kazoo drops every watch when the connection is
  lost, so the listener must read again (with watches) what it watches;
- ``EXPIRED``: the session expired: this member's ephemeral nodes (registration, owners) are
  gone. kazoo connects a new session by itself and ``RECONNECTED`` follows.

Ownership is checked by value **and** session: an owner node holding this thread's id but
created by another session (this consumer id's previous life, killed before its session
timed out) is not ours, and will vanish by itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError, NoNodeError,
                              NotEmptyError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState

from twisted_broker.registry import paths
from twisted_broker.registry import replication_paths

log = logging.getLogger(__name__)

CHANGED, RECONNECTED, EXPIRED = "changed", "reconnected", "expired"


class RegistryError(Exception):
    """A ZooKeeper call failed: not connected, timed out, session expired, or refused."""


class ConsumerIdInUse(RegistryError):
    """Another live session holds this consumer id's registration with another value."""


@contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise RegistryError(f"{what}: {type(exc).__name__} {exc}".rstrip()) from exc


class ConsumerRegistry:
    """The ``/consumers/<group>`` and ``/brokers`` nodes one consumer connector reads and writes.

    Thread-safe (kazoo serializes requests); every method blocks the calling thread.
    """

    def __init__(self, zk_connect: str, group: str, *, session_timeout_ms: int,
                 connection_timeout_ms: int, on_event: Callable[[str], object]) -> None:
        self.group = group
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._request_timeout_s = max(connection_timeout_ms, session_timeout_ms) / 1000
        self._on_event = on_event
        self._closing = False
        self._disconnected = False
        # kazoo keeps reconnecting in the background, as 0.7's ZkClient does.
        self._client = KazooClient(hosts=zk_connect, timeout=session_timeout_ms / 1000,
                                   connection_retry={"max_tries": -1, "max_delay": 2})
        self._client.add_listener(self._on_state)

    # -- session ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect. Raises RegistryError if not connected within zk.connectiontimeout.ms."""
        with _translated(f"connecting to ZooKeeper for group {self.group}"):
            self._client.start(self._connection_timeout_s)

    def close(self) -> None:
        """Close the session: its ephemeral nodes vanish at once. Idempotent."""
        self._closing = True
        try:
            self._client.stop()
            self._client.close()
        except Exception as exc:  # closing must not fail a shutdown
            log.warning("closing the ZooKeeper session of group %s: %s", self.group, exc)

    @property
    def session_id(self) -> int | None:
        """The current session's id (None before the first connection)."""
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    @property
    def connected(self) -> bool:
        return self._client.connected

    def _on_state(self, state: KazooState) -> None:  # kazoo's thread: must not block
        if self._closing:
            return
        if state == KazooState.LOST:
            self._disconnected = True
            self._on_event(EXPIRED)
        elif state == KazooState.SUSPENDED:
            self._disconnected = True
        elif state == KazooState.CONNECTED and self._disconnected:
            self._disconnected = False
            self._on_event(RECONNECTED)

    def _watch(self, event) -> None:  # kazoo's thread
        # EventType.NONE is kazoo dropping its watches on a lost connection: the state
        # listener reports that as RECONNECTED once it is back.
        if event.type != EventType.NONE and not self._closing:
            self._on_event(CHANGED)

    # -- the consumer's registration ----------------------------------------------------------

    def register_consumer(self, consumer_id: str, value: bytes, *, wait_s: float) -> None:
        """Create the ephemeral ``ids/<consumer_id>`` node holding ``value``.

        A node of this id from another session (this consumer's previous run, not yet timed
        out) is waited for up to ``wait_s`` to vanish; then ConsumerIdInUse. 0.7 accepted any
        node with the same value, which later vanished with the old session.
        Raises RegistryError.
        """
        path = paths.consumer_id_path(self.group, consumer_id)
        deadline = time.monotonic() + wait_s
        while True:
            with _translated(f"registering {path}"):
                try:
                    self._wait(self._client.create_async(path, value, ephemeral=True, makepath=True))
                    return
                except NodeExistsError:
                    pass
                try:
                    existing, stat = self._wait(self._client.get_async(path))
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    if existing != value:
                        self._wait(self._client.set_async(path, value, stat.version))
                    return
            if time.monotonic() > deadline:
                raise ConsumerIdInUse(f"consumer id {consumer_id} of group {self.group} is registered "
                                      f"by another live session ({existing!r})")
            time.sleep(0.1)

    def consumer_ids(self) -> list[str]:
        """The group's registered consumer ids, watched for changes."""
        path = paths.consumer_ids_path(self.group)
        with _translated(f"listing {path}"):
            return self._children_watched(path)

    def consumer_registration(self, consumer_id: str) -> bytes | None:
        """A member's registration value; None if it just left."""
        return self._get_or_none(paths.consumer_id_path(self.group, consumer_id))

    # -- brokers ---------------------------------------------------------------------------------

    def topics(self, *, watch: bool) -> list[str]:
        """Children of ``/brokers/topics`` and of ``/replication/topics`` (replicated topics),
        sorted (none if neither exists yet)."""
        found: set[str] = set()
        with _translated("listing topics"):
            for path in (paths.BROKER_TOPICS, replication_paths.TOPICS):
                if watch:
                    found.update(self._children_watched(path))
                    continue
                try:
                    found.update(self._wait(self._client.get_children_async(path)))
                except NoNodeError:
                    pass
        return sorted(found)

    def topic_partition_counts(self, topic: str) -> dict[str, int]:
        """``{broker node name: partition count}`` under ``/brokers/topics/<topic>``, whose
        children are watched (or its creation, if it does not exist yet). Raises
        RegistryError, or ValueError for a count that is not decimal."""
        path = paths.topic_path(topic)
        with _translated(f"reading {path}"):
            counts: dict[str, int] = {}
            for broker in self._children_watched(path):
                value = self._get_or_none(f"{path}/{broker}")
                if value is not None:  # None: the broker just left; its watch fires
                    counts[broker] = paths.decode_partition_count(value)
            return counts

    def replicated_partition_count(self, topic: str) -> int:
        """The partition count of a replicated topic, from ``/replication/topics/<topic>``,
        watched (or its creation); 0 if it is not replicated. Raises RegistryError, or
        ValueError for a value that does not parse."""
        path = replication_paths.topic_path(topic)
        with _translated(f"reading {path}"):
            while True:
                try:
                    value, _stat = self._wait(self._client.get_async(path, watch=self._watch))
                    return replication_paths.TopicAssignment.decode(value).partition_count
                except NoNodeError:
                    if self._wait(self._client.exists_async(path, watch=self._watch)) is None:
                        return 0

    def brokers(self) -> dict[int, tuple[str, int]]:
        """``{broker id: (host, port)}`` of the registered brokers (not watched: 0.7 reads the
        cluster at each rebalance). A malformed registration is logged and skipped."""
        with _translated("listing brokers"):
            try:
                ids = self._wait(self._client.get_children_async(paths.BROKER_IDS))
            except NoNodeError:
                return {}
        brokers = {}
        for name in ids:
            if name.isascii() and name.isdigit():
                address = self.broker_address(int(name))
                if address is not None:
                    brokers[int(name)] = address
        return brokers

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """``(host, port)`` of a registered broker; None if it is not registered."""
        value = self._get_or_none(paths.broker_id_path(broker_id))
        if value is None:
            return None
        try:
            info = paths.BrokerInfo.decode(broker_id, value)
        except ValueError as exc:
            log.warning("ignoring broker %d: %s", broker_id, exc)
            return None
        return info.host, info.port

    # -- offsets and owners -------------------------------------------------------------------

    def read_offset(self, topic: str, partition: str) -> int | None:
        """The committed offset of a partition; None if none was committed. Raises
        RegistryError, or ValueError for a node that is not a decimal long."""
        value = self._get_or_none(paths.offset_path(self.group, topic, partition))
        return None if value is None else paths.decode_offset(value)

    def write_offset(self, topic: str, partition: str, offset: int) -> None:
        """Write (create if needed, persistent) a partition's offset. Raises RegistryError."""
        path = paths.offset_path(self.group, topic, partition)
        value = paths.encode_offset(offset)
        with _translated(f"writing {path}"):
            try:
                self._wait(self._client.set_async(path, value))
            except NoNodeError:
                try:
                    self._wait(self._client.create_async(path, value, makepath=True))
                except NodeExistsError:
                    self._wait(self._client.set_async(path, value))

    def claim(self, topic: str, partition: str, thread_id: str) -> bool:
        """Create the ephemeral owner node of a partition with ``thread_id``. True if this
        session now owns it (also if it already did), False if someone else does."""
        path = paths.owner_path(self.group, topic, partition)
        value = paths.encode_owner(thread_id)
        with _translated(f"claiming {path}"):
            for _ in range(2):  # a second try if the owner released it between the two calls
                try:
                    self._wait(self._client.create_async(path, value, ephemeral=True, makepath=True))
                    return True
                except NodeExistsError:
                    pass
                try:
                    existing, stat = self._wait(self._client.get_async(path))
                except NoNodeError:
                    continue
                return existing == value and stat.ephemeralOwner == self.session_id
            return False

    def release(self, topic: str, partition: str, thread_id: str) -> None:
        """Delete a partition's owner node if it is ``thread_id``'s in this session; a node
        that is gone or someone else's is left alone. Raises RegistryError."""
        path = paths.owner_path(self.group, topic, partition)
        with _translated(f"releasing {path}"):
            try:
                existing, stat = self._wait(self._client.get_async(path))
                if existing == paths.encode_owner(thread_id) and stat.ephemeralOwner == self.session_id:
                    self._wait(self._client.delete_async(path, stat.version))
            except (NoNodeError, BadVersionError, NotEmptyError):
                pass

    def owner(self, topic: str, partition: str) -> str | None:
        """The thread id owning a partition; None if unowned."""
        value = self._get_or_none(paths.owner_path(self.group, topic, partition))
        return None if value is None else paths.decode_owner(value)

    # -- helpers -----------------------------------------------------------------------------------

    def _children_watched(self, path: str) -> list[str]:
        """Children of ``path`` with a child watch; if it does not exist, a watch on its
        creation and no children."""
        while True:
            try:
                return self._wait(self._client.get_children_async(path, watch=self._watch))
            except NoNodeError:
                if self._wait(self._client.exists_async(path, watch=self._watch)) is None:
                    return []
                # created between the two calls: list it

    def _get_or_none(self, path: str) -> bytes | None:
        with _translated(f"reading {path}"):
            try:
                value, _stat = self._wait(self._client.get_async(path))
                return value
            except NoNodeError:
                return None

    def _wait(self, async_result):
        # kazoo's blocking calls wait forever while disconnected; ours give up, so a
        # rebalance or a commit fails and is retried instead of hanging.
        return async_result.get(timeout=self._request_timeout_s)
