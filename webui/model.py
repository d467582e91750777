"""ConsoleModel: what the pages ask beyond the registry cache, and the one write action.

The registry (brokers, topics, groups) comes from the ClusterCache, kept current by watches.
What changes with every message (offsets, the messages themselves) is asked of the brokers
over the wire when a page needs it, per topic or per group, never for the whole cluster:
the overview and group list cost no broker request at all.

Where a partition's size and segment count come from (neither is in the 0.7 wire protocol):

- a console embedded in a broker (``--webui``) has that broker's own figures
  (server/stats.broker_snapshot): exact size, segments, and the message rate the broker
  counts as it appends (over the last minute, so it is known from the first page view);
- for every other broker, size is ``latest - earliest`` (offsets are byte positions, so this
  is exactly the bytes retained and flushed), the segment count is unknown (None), and the
  rate is in bytes per second, from the latest offsets seen over the last minute.

The write action, resetting a stopped group's offsets, reads ZooKeeper afresh (not the cache)
right before writing, and refuses while the group has a registered consumer or an owner
node: a live consumer keeps its position in memory and would write it back at its next
commit. As the ``reset-offsets`` command, it reads every new offset from the brokers before
writing the first, so a broker that is down changes nothing. A consumer that registers
between the check and the writes is not stopped; that is the operator's to avoid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted_broker.registry import paths
from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError
from webui.broker_offsets import EARLIEST_TIME, LATEST_TIME, BrokerClients, BrokerUnavailable, OffsetBook, gather
from webui.cluster_cache import GroupState
from webui.replicated_entries import ReplicatedTopicEntry
from webui.lag_history import LagHistory
from webui.modern_groups import ModernGroups
from webui.message_browser import BrowseResult, read_backward, read_forward

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalBroker:
    """The broker a console is embedded in: its id and its statistics."""

    broker_id: int
    snapshot: Callable[[], dict[str, Any]]  # server.stats.broker_snapshot(stats, logs)
    # server.stats.replication_snapshot of its replication; None without ZooKeeper
    replication: Callable[[], dict[str, Any]] | None = None


class ActionRefused(Exception):
    """The write action was refused; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ConsoleModel:
    def __init__(self, cluster, clients: BrokerClients, offsets: OffsetBook, history: LagHistory, *,
                 zk=None, local_broker: LocalBroker | None = None, modern: ModernGroups | None = None) -> None:
        self.cluster = cluster
        self.modern = modern
        self.clients = clients
        self.offsets = offsets
        self.history = history
        self.local_broker = local_broker
        self._zk = zk

    # -- brokers ---------------------------------------------------------------------------

    def broker_snapshot(self, broker_id: int) -> dict[str, Any] | None:
        """The broker's 0.7 statistics if this console runs inside it, else None."""
        if self.local_broker is None or self.local_broker.broker_id != broker_id:
            return None
        return self.local_broker.snapshot()

    def broker_replication(self, broker_id: int) -> dict[str, Any] | None:
        """The broker's own replication figures if this console runs inside it, else None."""
        local = self.local_broker
        if local is None or local.broker_id != broker_id or local.replication is None:
            return None
        return local.replication()

    # -- topics ----------------------------------------------------------------------------

    async def topic_figures(self, topic: str) -> dict[tuple[int, int], dict[str, Any]]:
        """Per ``(broker, partition)``: earliest, latest, size, segments, rates, source."""
        counts = self.cluster.topic_brokers(topic)
        brokers = self.cluster.brokers()
        keys = [(broker_id, partition) for broker_id, count in counts.items() for partition in range(count)
                if broker_id in brokers]
        answers = await gather([self._offset_pair(topic, *key) for key in keys])
        local = {}
        if self.local_broker is not None and self.local_broker.broker_id in counts:
            snapshot = self.broker_snapshot(self.local_broker.broker_id)
            local = {log_["partition"]: log_ for log_ in snapshot["logs"] if log_["topic"] == topic}
        figures = {}
        for (broker_id, partition), (earliest, latest) in zip(keys, answers):
            figure: dict[str, Any] = {
                "earliest": earliest, "latest": latest,
                "size": latest - earliest if earliest is not None and latest is not None else None,
                "segments": None, "bytes_per_second": self.offsets.byte_rate(topic, broker_id, partition),
                "messages_per_second": None, "source": "wire",
                "error": self.clients.errors.get(broker_id) if latest is None else None}
            if self.local_broker is not None and broker_id == self.local_broker.broker_id and partition in local:
                figure.update(size=local[partition]["size"], segments=local[partition]["segments"],
                              messages_per_second=local[partition]["messages_per_second"],
                              source="broker")
            figures[(broker_id, partition)] = figure
        return figures

    async def replicated_figures(self, entry: ReplicatedTopicEntry) -> dict[int, dict[str, Any]]:
        """Per partition of a replicated topic: earliest, latest (up to the high watermark),
        byte rate, as its leader answers 0.7's Offsets request; nothing for one without a
        registered leader."""
        brokers = self.cluster.brokers()
        leaders = {partition: state.leader for partition, state in entry.states.items()
                   if state is not None and state.online and state.leader in brokers}
        answers = await gather([self._offset_pair(entry.topic, leader, partition)
                                for partition, leader in leaders.items()])
        figures = {}
        for (partition, leader), (earliest, latest) in zip(leaders.items(), answers):
            figures[partition] = {"earliest": earliest, "latest": latest,
                                  "bytes_per_second": self.offsets.byte_rate(entry.topic, leader, partition),
                                  "error": self.clients.errors.get(leader) if latest is None else None}
        return figures

    async def _offset_pair(self, topic: str, broker_id: int, partition: int) -> tuple[int | None, int | None]:
        earliest, latest = await gather([self.offsets.earliest(topic, broker_id, partition),
                                         self.offsets.latest(topic, broker_id, partition)])
        return earliest, latest

    def groups_of_topic(self, topic: str) -> list[str]:
        """Groups with offsets or owners for ``topic`` (from the cache)."""
        return [group for group in self.cluster.groups()
                if (state := self.cluster.group(group)) is not None and topic in state.topics]

    # -- groups ----------------------------------------------------------------------------

    async def group_latest(self, state: GroupState, topics: list[str]) -> dict[tuple[str, str], int | None]:
        """``{(topic, partition name): latest offset}`` of every partition of ``topics`` (the
        group's): 0.7's latest offset (a byte position) for a 0.7 group, from each partition's
        broker or a replicated partition's leader; the modern end for a group of Kafka clients
        (modern_groups.py)."""
        if not state.registered:
            numbers = {(topic, name): number for topic in topics
                       for name, number in self.cluster.modern_partitions(topic).items()}
            ends = await self.modern.ends({(topic, number) for (topic, _name), number in numbers.items()})
            return {key: ends.get((key[0], number)) for key, number in numbers.items()}
        brokers = self.cluster.brokers()
        keys, asked = [], []
        for topic in topics:
            for broker_id, count in self.cluster.topic_brokers(topic).items():
                if broker_id in brokers:
                    keys += [(topic, paths.partition_name(broker_id, p)) for p in range(count)]
                    asked += [(topic, broker_id, p) for p in range(count)]
            replicated = self.cluster.replicated_topic(topic)
            for partition, partition_state in (replicated.states.items() if replicated is not None else ()):
                if partition_state is not None and partition_state.leader in brokers:
                    keys.append((topic, str(partition)))
                    asked.append((topic, partition_state.leader, partition))
        values = await gather([self.offsets.latest(*key) for key in asked])
        return dict(zip(keys, values))

    async def group_members(self, state: GroupState):
        """A group of Kafka clients' members (GroupMembers) from its coordinator; None for a
        0.7 group (its consumers are in the registry) or when no coordinator answers."""
        return None if state.registered else await self.modern.members(state.group)

    # -- messages --------------------------------------------------------------------------

    def partition_exists(self, topic: str, broker_id: int, partition: int) -> bool:
        return 0 <= partition < self.cluster.topic_brokers(topic).get(broker_id, 0)

    async def browse(self, topic: str, broker_id: int, partition: int, *, offset: int | None,
                     before: int | None, count: int) -> tuple[BrowseResult | None, int | None, int | None, str | None]:
        """A page of messages from ``offset``, or ending at ``before``, or (neither) the newest.
        Returns ``(result, earliest, latest, problem)``."""
        earliest, latest = await self._offset_pair(topic, broker_id, partition)
        if earliest is None or latest is None:
            return None, earliest, latest, (self.clients.errors.get(broker_id)
                                            or f"broker {broker_id} did not answer")

        def fetch(position: int, max_size: int):
            return self.clients.fetch(broker_id, topic, partition, position, max_size)

        try:
            if offset is not None:
                if not earliest <= offset <= latest:
                    return None, earliest, latest, (f"offset {offset} is outside the partition's "
                                                    f"range [{earliest}, {latest}]")
                return await read_forward(fetch, offset, count), earliest, latest, None
            end = latest if before is None else before
            if not earliest <= end <= latest:
                return None, earliest, latest, f"offset {end} is outside the partition's range [{earliest}, {latest}]"
            return await read_backward(fetch, end, count, earliest=earliest), earliest, latest, None
        except BrokerUnavailable as exc:
            return None, earliest, latest, str(exc)

    # -- the write action --------------------------------------------------------------------

    async def reset_offsets(self, group: str, topic: str, time: int) -> list[tuple[str, int | None, int]]:
        """Set every registered partition's committed offset of ``topic`` in ``group`` to the
        offset at ``time`` (-2 earliest, -1 latest, or ms since the epoch: the start of the
        newest segment written before it, or the earliest). Returns ``(partition, old, new)``
        rows. Raises ActionRefused."""
        if self._zk is None:
            raise ActionRefused(409, "this console has no ZooKeeper: there are no consumer groups")
        state = self.cluster.group(group)
        if state is None:
            raise ActionRefused(404, f"there is no consumer group {group}")
        if not state.registered:
            # Its offsets are modern offsets, which 0.7's Offsets requests do not answer.
            raise ActionRefused(409, f"group {group} is a group of Kafka clients: reset its offsets with "
                                     "a Kafka client through the modern listener")
        await self._refuse_if_live(group, topic)
        counts = self.cluster.topic_brokers(topic)
        if not counts:
            raise ActionRefused(404, f"no broker has registered topic {topic}")
        down = sorted(set(counts) - set(self.cluster.brokers()))
        if down:
            raise ActionRefused(503, f"broker(s) {', '.join(map(str, down))} of {topic} are not registered, "
                                     "so their offsets cannot be read; nothing was changed")
        targets = [(broker_id, partition) for broker_id, count in counts.items() for partition in range(count)]
        try:
            new = await gather([self._offset_at(topic, b, p, time) for b, p in targets])
        except BrokerUnavailable as exc:
            raise ActionRefused(503, f"{exc}; nothing was changed") from None
        await self._refuse_if_live(group, topic)  # again, as late as possible
        old = await self._committed(group, topic)
        rows = []
        for (broker_id, partition), offset in zip(targets, new):
            name = paths.partition_name(broker_id, partition)
            await self._write_offset(paths.offset_path(group, topic, name), offset)
            rows.append((name, old.get(name), offset))
        log.warning("offsets of group %s topic %s reset to time %d: %s", group, topic, time,
                    ", ".join(f"{name} {before} -> {after}" for name, before, after in rows))
        return rows

    async def _refuse_if_live(self, group: str, topic: str) -> None:
        live = await self._children(paths.consumer_ids_path(group))
        owners = await self._children(paths.owners_path(group, topic))
        if live or owners:
            who = ", ".join(sorted(live)) or f"owners of {len(owners)} partition(s)"
            raise ActionRefused(409, f"group {group} has live consumers ({who}); stop them first, "
                                     "or they will overwrite the offsets at their next commit")

    async def _offset_at(self, topic: str, broker_id: int, partition: int, time: int) -> int:
        offsets = await self.clients.offsets(broker_id, topic, partition, time, 1)
        if not offsets and time not in (EARLIEST_TIME, LATEST_TIME):
            offsets = await self.clients.offsets(broker_id, topic, partition, EARLIEST_TIME, 1)
        if not offsets:
            raise BrokerUnavailable(f"broker {broker_id} answered no offset for {topic} {broker_id}-{partition}")
        return offsets[0]

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._zk.get_children(path)
        except NoNodeError:
            return []

    async def _committed(self, group: str, topic: str) -> dict[str, int | None]:
        offsets = {}
        for name in await self._children(paths.offsets_path(group, topic)):
            try:
                value, _stat = await self._zk.get(paths.offset_path(group, topic, name))
                offsets[name] = paths.decode_offset(value)
            except (NoNodeError, ValueError):
                offsets[name] = None
        return offsets

    async def _write_offset(self, path: str, offset: int) -> None:
        value = paths.encode_offset(offset)
        try:
            await self._zk.set(path, value)
        except NoNodeError:
            try:
                await self._zk.create(path, value)
            except NodeExistsError:  # written meanwhile; ours is the later write
                await self._zk.set(path, value)
