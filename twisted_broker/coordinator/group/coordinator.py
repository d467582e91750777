"""The group coordinator's service edge: the pure table of groups (table.py) on a reactor's
clock, with the JoinGroup and SyncGroup requests that wait as Deferreds, and the committed
offsets in a store (offset_store.py).

Each group has at most one timer, set for its earliest deadline (a session's end, the end of
a join phase); a heartbeat only moves a deadline later, so it leaves the timer alone and the
timer, when it fires, finds what is really due and sets itself again. Whether this broker is
the coordinator is asked of ``is_coordinator`` at every request: when it says no, every
group held here is let go (waiting requests get NOT_COORDINATOR) so that members rediscover
the coordinator and rejoin there; offsets survive in the store.
"""

from __future__ import annotations

import logging
import uuid as uuid_module
from collections.abc import Callable, Mapping, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from twisted_broker.coordinator.group.messages import (
    Answers, FetchedOffset, GroupConfig, GroupDescription, JoinRequest, JoinResult, ListGroupsResult,
    OffsetCommit, OffsetFetchResult, Step, SyncResult,
)
from twisted_broker.coordinator.group.offset_store import NO_OFFSET, STORE_ERRORS, StoredOffset
from twisted_broker.coordinator.group.state import EMPTY
from twisted_broker.coordinator.group.table import GroupTable, valid_group_id
from twisted_broker.codec.kafka import errors

log = logging.getLogger(__name__)

# topic -> {modern partition: the partition's 0.7 name in ZooKeeper}; None for an unknown
# topic. It may return a Deferred of that (to read a topic's layout first).
PartitionNames = Callable[[str], "Mapping[int, str] | None | Deferred[Mapping[int, str] | None]"]
MAX_METADATA_BYTES = 4096  # Kafka's offset.metadata.max.bytes


class GroupCoordinator:
    """Consumer groups of modern clients on one broker. ``offsets`` is a ZooKeeperOffsets or
    FileOffsets; ``partition_names`` names partitions for the store. Everything runs on the
    reactor thread."""

    def __init__(self, *, clock: IReactorTime, offsets, partition_names: PartitionNames,
                 is_coordinator: Callable[[], bool] = lambda: True, config: GroupConfig = GroupConfig(),
                 new_uuid: Callable[[], uuid_module.UUID] = uuid_module.uuid4) -> None:
        self._clock = clock
        self._offsets = offsets
        self._partition_names = partition_names
        self._is_coordinator = is_coordinator
        self.table = GroupTable(config=config, new_uuid=new_uuid)
        self._timers: dict[str, IDelayedCall] = {}
        self._join_waiters: dict[tuple[str, str], list[Deferred]] = {}
        self._sync_waiters: dict[tuple[str, str], list[Deferred]] = {}

    def _now_ms(self) -> int:
        # round, not truncate: a timer set for a deadline fires at a time whose float product
        # may fall a hair short of it
        return round(self._clock.seconds() * 1000)

    def _coordinating(self) -> bool:
        if self._is_coordinator():
            return True
        if self.table.groups:
            log.info("no longer the group coordinator: letting %d group(s) go", len(self.table.groups))
            self.resign()
        return False

    # -- membership ----------------------------------------------------------------------------

    def join_group(self, group_id: str, request: JoinRequest) -> Deferred[JoinResult]:
        """JoinGroup: fires when the join phase ends (or at once with an error)."""
        if not self._coordinating():
            return succeed(JoinResult(errors.NOT_COORDINATOR, member_id=request.member_id))
        return self._waited(group_id, self.table.join(group_id, request, self._now_ms()), self._join_waiters)

    def sync_group(self, group_id: str, member_id: str, generation: int,
                   assignments: Mapping[str, bytes]) -> Deferred[SyncResult]:
        """SyncGroup: fires with the member's assignment once the leader has sent them."""
        if not self._coordinating():
            return succeed(SyncResult(errors.NOT_COORDINATOR))
        step = self.table.sync(group_id, member_id, generation, assignments, self._now_ms())
        return self._waited(group_id, step, self._sync_waiters)

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> int:
        if not self._coordinating():
            return errors.NOT_COORDINATOR
        return self.table.heartbeat(group_id, member_id, generation, self._now_ms())

    def leave_group(self, group_id: str, member_id: str) -> int:
        if not self._coordinating():
            return errors.NOT_COORDINATOR
        step = self.table.leave(group_id, member_id, self._now_ms())
        self._deliver(group_id, step.answers)
        return step.reply

    def _waited(self, group_id: str, step: Step, waiters: dict) -> Deferred:
        if step.reply is not None:
            self._deliver(group_id, step.answers)
            return succeed(step.reply)
        key = (group_id, step.member_id)
        deferred = Deferred(lambda d: self._forget(waiters, key, d))
        waiters.setdefault(key, []).append(deferred)
        self._deliver(group_id, step.answers)
        return deferred

    @staticmethod
    def _forget(waiters: dict, key: tuple[str, str], deferred: Deferred) -> None:
        """A waiting request was cancelled (its connection went): the group is unchanged, as
        in Kafka, and the member goes when its session ends."""
        pending = waiters.get(key, [])
        if deferred in pending:
            pending.remove(deferred)
        if not pending:
            waiters.pop(key, None)

    def _deliver(self, group_id: str, answers: Answers) -> None:
        for member_id, result in answers.joins.items():
            for deferred in self._join_waiters.pop((group_id, member_id), []):
                deferred.callback(result)
        for member_id, result in answers.syncs.items():
            for deferred in self._sync_waiters.pop((group_id, member_id), []):
                deferred.callback(result)
        self._set_timer(group_id)

    def _set_timer(self, group_id: str) -> None:
        deadline = self.table.next_deadline_ms(group_id)
        timer = self._timers.get(group_id)
        if timer is not None and timer.active():
            if deadline is not None and timer.getTime() * 1000 <= deadline:
                return  # due no later than needed: it will find what is due and set itself again
            timer.cancel()
        self._timers.pop(group_id, None)
        if deadline is not None:
            delay_s = max(deadline / 1000 - self._clock.seconds(), 0)
            self._timers[group_id] = self._clock.callLater(delay_s, self._expire, group_id)

    def _expire(self, group_id: str) -> None:
        self._timers.pop(group_id, None)
        self._deliver(group_id, self.table.tick(group_id, self._now_ms()))

    def resign(self) -> None:
        """Let every group go (this broker stopped being the coordinator, or stops)."""
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        for group_id, answers in self.table.clear().items():
            self._deliver(group_id, answers)
        for waiters in (self._join_waiters, self._sync_waiters):  # cancelled ones already went
            for (_, member_id), deferreds in list(waiters.items()):
                for deferred in deferreds:
                    deferred.callback(JoinResult(errors.NOT_COORDINATOR, member_id=member_id)
                                      if waiters is self._join_waiters else SyncResult(errors.NOT_COORDINATOR))
            waiters.clear()

    # -- offsets -------------------------------------------------------------------------------

    @inlineCallbacks
    def commit_offsets(self, group_id: str, member_id: str, generation: int,
                       offsets: Sequence[OffsetCommit]):
        """OffsetCommit: fires with ``{(topic, partition): error code}`` for every partition.
        Generation -1 with an empty member id commits for a group without members."""
        if not self._coordinating():
            return {(o.topic, o.partition): errors.NOT_COORDINATOR for o in offsets}
        error = self.table.check_commit(group_id, member_id, generation, self._now_ms())
        self._set_timer(group_id)
        if error:
            return {(o.topic, o.partition): error for o in offsets}
        results, stored, keys = {}, [], []
        names = yield self._names({commit.topic for commit in offsets})
        for commit in offsets:
            key = (commit.topic, commit.partition)
            name = names[commit.topic].get(commit.partition)
            if name is None:
                results[key] = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif len(commit.metadata.encode()) > MAX_METADATA_BYTES:
                results[key] = errors.OFFSET_METADATA_TOO_LARGE
            else:
                stored.append(StoredOffset(commit.topic, name, commit.offset, commit.metadata))
                keys.append(key)
        if stored:
            try:
                written = yield self._offsets.commit(group_id, stored)
            except STORE_ERRORS as exc:
                log.warning("commit of group %s failed: %s", group_id, exc)
                written = [False] * len(stored)
            for key, ok in zip(keys, written):
                results[key] = errors.NONE if ok else errors.COORDINATOR_NOT_AVAILABLE
        return results

    @inlineCallbacks
    def fetch_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]] | None):
        """OffsetFetch: fires with an OffsetFetchResult; ``partitions`` None asks for every
        partition the group committed (OffsetFetch v2+). Membership is not checked (Kafka)."""
        if not self._coordinating():
            return OffsetFetchResult(errors.NOT_COORDINATOR)
        if not valid_group_id(group_id):
            return OffsetFetchResult(errors.INVALID_GROUP_ID)
        try:
            if partitions is None:
                stored = yield self._offsets.fetch_all(group_id)
                names = yield self._names({topic for topic, _ in stored})
                found = {}
                for (topic, name), (offset, metadata) in stored.items():
                    numbers = {n: p for p, n in names[topic].items()}
                    if name in numbers:  # a name no partition has any more (its broker left) is skipped
                        found[topic, numbers[name]] = FetchedOffset(offset, metadata)
                return OffsetFetchResult(errors.NONE, found)
            known = yield self._names({topic for topic, _ in partitions})
            names: dict[str, list[str]] = {}
            asked: dict[tuple[str, str], tuple[str, int]] = {}
            for topic, partition in partitions:
                name = known[topic].get(partition)
                if name is not None:
                    names.setdefault(topic, []).append(name)
                    asked[topic, name] = (topic, partition)
            stored = yield self._offsets.fetch(group_id, names)
        except STORE_ERRORS as exc:
            log.warning("offsets of group %s not read: %s", group_id, exc)
            return OffsetFetchResult(errors.COORDINATOR_NOT_AVAILABLE)
        found = {key: FetchedOffset(NO_OFFSET) for key in partitions}
        for key, (offset, metadata) in stored.items():
            found[asked[key]] = FetchedOffset(offset, metadata)
        return OffsetFetchResult(errors.NONE, found)

    @inlineCallbacks
    def _names(self, topics):
        """``{topic: {modern partition: 0.7 name}}`` ({} for a topic not known)."""
        names = {}
        for topic in sorted(topics):
            names[topic] = (yield maybeDeferred(self._partition_names, topic)) or {}
        return names

    # -- listing -------------------------------------------------------------------------------

    @inlineCallbacks
    def describe_groups(self, group_ids: Sequence[str]):
        """DescribeGroups: fires with one GroupDescription per id. A group held nowhere in
        memory but with committed offsets in the store is Empty; with none, Dead."""
        if not self._coordinating():
            return [GroupDescription(g, errors.NOT_COORDINATOR, "") for g in group_ids]
        stored = set()
        if any(g not in self.table.groups for g in group_ids):
            try:
                stored = set((yield self._offsets.groups()))
            except STORE_ERRORS as exc:
                log.warning("groups not listed from the offset store: %s", exc)
        descriptions = []
        for group_id in group_ids:
            description = self.table.describe(group_id)
            if group_id not in self.table.groups and group_id in stored:
                description = GroupDescription(group_id, errors.NONE, EMPTY)
            descriptions.append(description)
        return descriptions

    @inlineCallbacks
    def list_groups(self):
        """ListGroups: fires with the groups held here and every group with stored offsets
        (0.7's groups among them, protocol type "")."""
        if not self._coordinating():
            return ListGroupsResult(errors.NOT_COORDINATOR)
        try:
            stored = yield self._offsets.groups()
        except STORE_ERRORS as exc:
            log.warning("groups not listed from the offset store: %s", exc)
            return ListGroupsResult(errors.COORDINATOR_NOT_AVAILABLE)
        listing = {group_id: "" for group_id in stored}
        listing.update(self.table.listing())
        return ListGroupsResult(errors.NONE, tuple(sorted(listing.items())))
