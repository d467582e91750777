"""Where committed offsets of groups are kept: in ZooKeeper at 0.7's paths, or in a file under
``log.dir`` for a broker without ZooKeeper.

ZooKeeper: ``/consumers/<group>/offsets/<topic>/<name>`` holds the offset in decimal, as 0.7's
consumers write it, so ``twisted-broker groups``, the console and /metrics read a modern
group's offsets as they read a 0.7 group's; ``<name>`` is the partition's name for 0.7
(``<broker>-<partition>``, or ``<partition>`` for a replicated topic), given by the caller.
A commit's metadata string, when not empty, sits at ``offsets_metadata/<topic>/<name>``;
a commit without one deletes it, so a fetch never returns the metadata of an older commit.

The file: ``<log.dir>/group-offsets``, JSON ``{"version": 1, "groups": {group: {topic:
{name: [offset, metadata]}}}}``, replaced whole and atomically at each commit. Consumers
commit every few seconds and the file holds one line per partition per group, so the
rewrite stays small; it runs on the reactor thread for that reason.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks, succeed

from twisted_broker.registry import paths
from twisted_broker.registry.zookeeper import UNAVAILABLE_ERRORS, NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.storage.checkpoints import write_atomically

log = logging.getLogger(__name__)

OFFSETS_FILE = "group-offsets"
STORE_ERRORS = (*UNAVAILABLE_ERRORS, OSError)  # a store that cannot answer now: clients retry
NO_OFFSET = -1  # Kafka's INVALID_OFFSET: nothing committed


@dataclass(frozen=True)
class StoredOffset:
    topic: str
    name: str  # the partition's 0.7 name
    offset: int
    metadata: str = ""


class ZooKeeperOffsets:
    """Offsets in ZooKeeper through the reactor's kazoo bridge. Every method's Deferred fails
    with kazoo's error when ZooKeeper does not answer."""

    def __init__(self, zk: ZooKeeper) -> None:
        self._zk = zk

    def commit(self, group: str, offsets: Sequence[StoredOffset]) -> Deferred[list[bool]]:
        """Write each offset (and its metadata); fires with one success flag per offset."""
        writes = [self._commit_one(group, stored) for stored in offsets]
        return DeferredList(writes, consumeErrors=True).addCallback(
            lambda results: [self._logged(ok, value, group) for ok, value in results])

    @staticmethod
    def _logged(ok: bool, value, group: str) -> bool:
        if not ok:
            value.trap(*STORE_ERRORS)  # anything else is our bug: it raises
            log.warning("commit of group %s not stored in ZooKeeper: %s", group, value.getErrorMessage())
        return ok

    @inlineCallbacks
    def _commit_one(self, group: str, stored: StoredOffset):
        metadata_path = paths.offset_metadata_path(group, stored.topic, stored.name)
        if stored.metadata:
            yield self._put(metadata_path, stored.metadata.encode())
        else:
            try:
                yield self._zk.delete(metadata_path)
            except NoNodeError:
                pass
        yield self._put(paths.offset_path(group, stored.topic, stored.name), paths.encode_offset(stored.offset))

    @inlineCallbacks
    def _put(self, path: str, value: bytes):
        try:
            yield self._zk.set(path, value)
        except NoNodeError:
            try:
                yield self._zk.create(path, value)
            except NodeExistsError:  # another commit created it meanwhile; ours is the later one
                yield self._zk.set(path, value)

    @inlineCallbacks
    def fetch(self, group: str, names: Mapping[str, Sequence[str]]):
        """``{(topic, name): (offset, metadata)}`` for the partitions asked (``{topic: [name]}``);
        NO_OFFSET where nothing (readable) was committed."""
        keys = [(topic, name) for topic, topic_names in names.items() for name in topic_names]
        reads = [self._read_one(group, topic, name) for topic, name in keys]
        results = yield _all_or_first_error(reads)
        return dict(zip(keys, results))

    @inlineCallbacks
    def fetch_all(self, group: str):
        """``{(topic, name): (offset, metadata)}`` of everything the group committed."""
        topics = yield self._children(f"{paths.CONSUMERS}/{group}/offsets")
        listings = yield _all_or_first_error([self._children(paths.offsets_path(group, t)) for t in topics])
        result = yield self.fetch(group, dict(zip(topics, listings)))
        return {key: value for key, value in result.items() if value[0] != NO_OFFSET}

    @inlineCallbacks
    def _read_one(self, group: str, topic: str, name: str):
        try:
            value, _ = yield self._zk.get(paths.offset_path(group, topic, name))
        except NoNodeError:
            return NO_OFFSET, ""
        try:
            offset = paths.decode_offset(value)
        except ValueError:
            log.warning("offset of group %s %s %s is %r, not a number: read as none", group, topic, name, value)
            return NO_OFFSET, ""
        try:
            metadata, _ = yield self._zk.get(paths.offset_metadata_path(group, topic, name))
        except NoNodeError:
            metadata = b""
        return offset, metadata.decode("utf-8", "replace")

    @inlineCallbacks
    def _children(self, path: str):
        try:
            children = yield self._zk.get_children(path)
        except NoNodeError:
            return []
        return sorted(children)

    def groups(self) -> Deferred[list[str]]:
        """Every group with a node under /consumers (0.7's groups too)."""
        return self._children(paths.CONSUMERS)


def _all_or_first_error(deferreds: list[Deferred]) -> Deferred[list]:
    return DeferredList(deferreds, fireOnOneErrback=True, consumeErrors=True).addCallbacks(
        lambda results: [value for _, value in results], lambda failure: failure.value.subFailure)


class FileOffsets:
    """Offsets in ``<log_dir>/group-offsets`` (a broker without ZooKeeper). Raises ValueError
    at construction if the file is there but unreadable: offsets must not be lost silently."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, OFFSETS_FILE)
        self._groups: dict[str, dict[str, dict[str, list]]] = {}
        try:
            with open(self.path, "rb") as file:
                data = json.loads(file.read().decode("utf-8"))
        except FileNotFoundError:
            return
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{self.path} is not a group offsets file: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("groups"), dict):
            raise ValueError(f"{self.path} is not a version 1 group offsets file")
        self._groups = data["groups"]

    def commit(self, group: str, offsets: Sequence[StoredOffset]) -> Deferred[list[bool]]:
        topics = self._groups.setdefault(group, {})
        for stored in offsets:
            topics.setdefault(stored.topic, {})[stored.name] = [stored.offset, stored.metadata]
        try:
            write_atomically(self.path, json.dumps({"version": 1, "groups": self._groups}).encode())
        except OSError as exc:
            log.error("commit of group %s not stored in %s: %s", group, self.path, exc)
            return succeed([False] * len(offsets))
        return succeed([True] * len(offsets))

    def fetch(self, group: str, names: Mapping[str, Sequence[str]]) -> Deferred[dict]:
        topics = self._groups.get(group, {})
        return succeed({(topic, name): tuple(topics.get(topic, {}).get(name, (NO_OFFSET, "")))
                        for topic, topic_names in names.items() for name in topic_names})

    def fetch_all(self, group: str) -> Deferred[dict]:
        return succeed({(topic, name): tuple(value) for topic, names in self._groups.get(group, {}).items()
                        for name, value in names.items()})

    def groups(self) -> Deferred[list[str]]:
        return succeed(sorted(self._groups))
