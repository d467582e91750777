"""ClusterView: blocking reads of a cluster's ZooKeeper registry, and the offset writes of tools.

The command-line tools run no reactor, so they talk to ZooKeeper through a plain blocking
kazoo client instead of the Twisted bridge in zookeeper.py. Every method reads the registry
as it is now (no watches, no cache): a tool asks once and prints. What a tool reads of every
topic is read in bulk (``topics_brokers``; ``_children_many`` and ``_data_many``): all the
reads in flight at once, so a thousand topics cost a few round trips' wait, not a thousand.
(On loopback that gains little: kazoo's own cost per read, a wake-up of its connection thread,
about 0.3 ms of Python, outweighs the round trip; over a network each round trip costs more.) Paths and values are spec
5.2's (paths.py); a path that does not exist reads as empty, as a chroot nobody has written to
yet does.

ZooKeeper that cannot be reached, or a session lost in the middle, raises
ZooKeeperUnavailable (a ConnectionError): the tools report it as one line, never kazoo's own
exception classes, which only modules of this package may name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from twisted_broker.registry import paths
from twisted_broker.registry import replication_paths

log = logging.getLogger(__name__)

T = TypeVar("T")
BULK_READS = 2000  # reads in flight at once at most (each holds a request and its answer)


class ZooKeeperUnavailable(ConnectionError):
    """ZooKeeper did not answer in time, or the session broke during a call."""


class ClusterView:
    """A connected ZooKeeper session on ``zk_connect`` (``host:port[,...][/chroot]``).

    Raises ZooKeeperUnavailable when no server answers within ``timeout_s``. Close it (or use
    it as a context manager): the session otherwise lingers until its timeout.
    """

    def __init__(self, zk_connect: str, *, timeout_s: float = 10.0, session_timeout_ms: int = 6000) -> None:
        self.zk_connect = zk_connect
        self._timeout_s = timeout_s
        # No retries of our own: a tool that cannot reach ZooKeeper says so and exits.
        self._client = KazooClient(hosts=zk_connect, timeout=session_timeout_ms / 1000)
        try:
            self._client.start(timeout_s)
        except (KazooTimeoutError, KazooException) as exc:
            self._client.close()
            raise ZooKeeperUnavailable(f"cannot connect to ZooKeeper at {zk_connect} within "
                                       f"{timeout_s:g} s ({exc or type(exc).__name__})") from None
        except ValueError as exc:  # kazoo's parse of the hosts string
            self._client.close()
            raise ZooKeeperUnavailable(f"bad ZooKeeper address {zk_connect!r}: {exc}") from None

    def close(self) -> None:
        """End the session (its ephemeral nodes, if any, go at once) and the client."""
        try:
            self._client.stop()
        finally:
            self._client.close()

    def __enter__(self) -> "ClusterView":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- brokers and topics (written by brokers) -------------------------------------------

    def brokers(self) -> dict[int, paths.BrokerInfo]:
        """The live brokers by id; a registration that does not parse is logged and skipped."""
        brokers = {}
        for child in self._children(paths.BROKER_IDS):
            value = self._data(f"{paths.BROKER_IDS}/{child}")
            if value is None:
                continue  # went away between the two reads
            try:
                broker_id = int(child)
                brokers[broker_id] = paths.BrokerInfo.decode(broker_id, value)
            except ValueError as exc:
                log.warning("skipping broker registration %s: %s", child, exc)
        return dict(sorted(brokers.items()))

    def topics(self) -> list[str]:
        """Every topic some broker has registered, sorted."""
        return sorted(self._children(paths.BROKER_TOPICS))

    def topic_brokers(self, topic: str) -> dict[int, int]:
        """``{broker id: partition count}`` of the brokers holding ``topic`` ({}: unknown topic)."""
        counts = {}
        for child in self._children(paths.topic_path(topic)):
            value = self._data(f"{paths.topic_path(topic)}/{child}")
            if value is None:
                continue
            try:
                counts[int(child)] = paths.decode_partition_count(value)
            except ValueError:
                log.warning("skipping %s/%s: partition count %r", paths.topic_path(topic), child, value)
        return dict(sorted(counts.items()))

    def topics_brokers(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """``topic_brokers`` of each of ``topics``, read in bulk."""
        listed = dict(zip(topics, self._children_many([paths.topic_path(topic) for topic in topics])))
        nodes = [(topic, child) for topic in topics for child in listed[topic]]
        values = self._data_many([f"{paths.topic_path(topic)}/{child}" for topic, child in nodes])
        found: dict[str, dict[int, int]] = {topic: {} for topic in topics}
        for (topic, child), value in zip(nodes, values):
            if value is None:
                continue
            try:
                found[topic][int(child)] = paths.decode_partition_count(value)
            except ValueError:
                log.warning("skipping %s/%s: partition count %r", paths.topic_path(topic), child, value)
        return {topic: dict(sorted(counts.items())) for topic, counts in found.items()}

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """``(broker id, partition)`` pairs of ``topic``, sorted numerically (spec 5.6)."""
        return [(broker_id, partition) for broker_id, count in self.topic_brokers(topic).items()
                for partition in range(count)]

    def modern_listeners(self) -> dict[int, tuple[str, int]]:
        """``{broker id: (host, port)}`` of the live brokers' modern listeners; a value that
        does not parse is logged and skipped."""
        listeners = {}
        for child in self._children(replication_paths.LISTENERS):
            value = self._data(f"{replication_paths.LISTENERS}/{child}")
            if value is None:
                continue
            try:
                data = json.loads(value)
                listeners[int(child)] = (str(data["host"]), int(data["port"]))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("skipping modern listener %s: %s", child, exc)
        return dict(sorted(listeners.items()))

    # -- consumer groups (written by consumers and tools) ------------------------------------

    def groups(self) -> list[str]:
        """Every consumer group with a node under /consumers, sorted."""
        return sorted(self._children(paths.CONSUMERS))

    def consumer_ids(self, group: str) -> list[str]:
        """The group's live consumers (ephemeral ``ids`` nodes), sorted."""
        return sorted(self._children(paths.consumer_ids_path(group)))

    def has_consumer_registry(self, group: str) -> bool:
        """Whether the group has an ``ids`` node: every 0.7 consumer registers there (and the
        node stays after it stops); a group of modern clients never does."""
        return self._call(lambda: self._client.exists(paths.consumer_ids_path(group))) is not None

    def consumer_subscription(self, group: str, consumer_id: str) -> str | None:
        """A live consumer's registration value (its topic -> stream count JSON, or filter)."""
        value = self._data(paths.consumer_id_path(group, consumer_id))
        return None if value is None else value.decode("utf-8", "replace")

    def group_topics(self, group: str) -> list[str]:
        """Topics the group has committed offsets for or owns partitions of, sorted."""
        group_path = paths.consumer_group_path(group)
        return sorted(set(self._children(f"{group_path}/offsets")) | set(self._children(f"{group_path}/owners")))

    def owners(self, group: str, topic: str) -> dict[str, str]:
        """``{partition name "b-p": owning thread id}`` for the group's owned partitions."""
        owners = {}
        for name in self._children(paths.owners_path(group, topic)):
            value = self._data(paths.owner_path(group, topic, name))
            if value is not None:
                owners[name] = value.decode("utf-8", "replace")
        return owners

    def offsets(self, group: str, topic: str) -> dict[str, int]:
        """``{partition name "b-p": committed offset}``; a value that is not a number is skipped."""
        offsets = {}
        for name in self._children(paths.offsets_path(group, topic)):
            value = self._data(paths.offset_path(group, topic, name))
            if value is None:
                continue
            try:
                offsets[name] = paths.decode_offset(value)
            except ValueError:
                log.warning("skipping offset of %s %s %s: %r is not a number", group, topic, name, value)
        return offsets

    def set_offset(self, group: str, topic: str, partition_name: str, offset: int) -> None:
        """Write a committed offset (decimal text, spec 5.2), creating the node if needed."""
        path = paths.offset_path(group, topic, partition_name)
        value = paths.encode_offset(offset)

        def write() -> None:
            try:
                self._client.set(path, value)
            except NoNodeError:
                try:
                    self._client.create(path, value, makepath=True)
                except NodeExistsError:  # a consumer committed meanwhile; ours is the later write
                    self._client.set(path, value)

        self._call(write)

    # -- plumbing ----------------------------------------------------------------------------

    def _children(self, path: str) -> list[str]:
        return self._call(lambda: self._client.get_children(path), missing=[])

    def _data(self, path: str) -> bytes | None:
        return self._call(lambda: self._client.get(path)[0], missing=None)

    def _children_many(self, nodes: Sequence[str]) -> list[list[str]]:
        """Each node's children ([] for a node that does not exist), all read at once."""
        return self._many(self._client.get_children_async, nodes, [])

    def _data_many(self, nodes: Sequence[str]) -> list[bytes | None]:
        """Each node's value (None for a node that does not exist), all read at once."""
        return [None if answer is None else answer[0] for answer in self._many(self._client.get_async, nodes, None)]

    def _many(self, read_async: Callable, nodes: Sequence[str], missing):
        def read() -> list:
            answers = []
            for start in range(0, len(nodes), BULK_READS):
                for pending in [read_async(node) for node in nodes[start:start + BULK_READS]]:
                    try:
                        answers.append(pending.get(timeout=self._timeout_s))
                    except NoNodeError:
                        answers.append(missing)
            return answers

        return self._call(read)

    def _call(self, operation: Callable[[], T], missing: T | None = None) -> T:
        try:
            return operation()
        except NoNodeError:
            return missing
        except (KazooTimeoutError, KazooException) as exc:
            raise ZooKeeperUnavailable(f"ZooKeeper at {self.zk_connect}: {exc or type(exc).__name__}") from None
