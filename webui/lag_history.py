"""The lag of every consumer group over the last hour, sampled by the console and kept in memory.

Every ``interval_s`` the sampler takes, for each group and each partition it has a committed
offset for, ``latest - committed`` (bytes: offsets are byte positions), with the latest offsets
asked of the brokers (OffsetBook shares requests, so a partition read by many groups is asked
once). A group's sample is its total lag and the lag per topic; a partition whose broker does
not answer is left out and the sample marked partial. Samples older than ``span_s`` go.

A group of Kafka clients (GroupState.registered False) commits modern offsets: its lag is
``modern end - committed`` (Kafka's consumer lag, in offsets), with the modern ends asked of the modern listeners in
one question per round (modern_groups.py); its samples say ``unit="offsets"``.

Nothing is stored on disk: a restarted console starts a new history. Memory is bounded by
groups x span / interval samples (200 groups, 1 h at 30 s: 48,000 small tuples).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from twisted_broker.registry import paths
from webui.broker_offsets import OffsetBook, gather

log = logging.getLogger(__name__)

HOUR_S = 3600.0


@dataclass(frozen=True)
class LagSample:
    time_s: float
    total: int  # in ``unit``, over the partitions that could be read
    per_topic: dict[str, int] = field(default_factory=dict)
    partial: bool = False  # some partition's latest offset was unknown
    unit: str = "bytes"  # "offsets" for a group of Kafka clients


class LagHistory:
    """Per group, the samples of the last ``span_s`` seconds, oldest first."""

    def __init__(self, *, span_s: float = HOUR_S) -> None:
        self.span_s = span_s
        self._samples: dict[str, deque[LagSample]] = {}
        self.rounds = 0
        self.last_round_s: float | None = None  # how long the last round took

    def add(self, group: str, sample: LagSample) -> None:
        samples = self._samples.setdefault(group, deque())
        samples.append(sample)
        while samples and sample.time_s - samples[0].time_s > self.span_s:
            samples.popleft()

    def samples(self, group: str) -> list[LagSample]:
        return list(self._samples.get(group, ()))

    def last(self, group: str) -> LagSample | None:
        samples = self._samples.get(group)
        return samples[-1] if samples else None

    def keep_only(self, groups: set[str]) -> None:
        """Forget the groups that no longer exist."""
        for group in set(self._samples) - groups:
            del self._samples[group]


async def sample_all(cluster, offsets: OffsetBook, history: LagHistory, now_s, *, modern=None) -> None:
    """One round: every group's lag now, added to ``history``. ``modern`` (a ModernGroups)
    answers the modern ends of Kafka clients' groups; without it they are not sampled."""
    started = now_s()
    groups = cluster.groups()
    brokers = cluster.brokers()
    wanted: dict[tuple[str, int, int], None] = {}
    wanted_modern: dict[tuple[str, int], None] = {}
    plans = []
    for group in groups:
        state = cluster.group(group)
        if state is None:
            continue
        plan = []
        if not state.registered:
            if modern is None:
                continue
            for topic, committed in state.offsets.items():
                numbers = cluster.modern_partitions(topic)
                for name, offset in committed.items():
                    if offset is not None and name in numbers:
                        plan.append(((topic, numbers[name]), topic, offset))
                        wanted_modern[(topic, numbers[name])] = None
            plans.append((group, plan, "offsets"))
            continue
        for topic, committed in state.offsets.items():
            counts = cluster.topic_brokers(topic)
            for name, offset in committed.items():
                try:
                    broker_id, partition = paths.parse_partition_name(name)
                except ValueError:
                    continue
                if offset is None or broker_id not in brokers or partition >= counts.get(broker_id, 0):
                    continue  # only partitions a broker holds: 0.7 closes the connection otherwise
                plan.append(((topic, broker_id, partition), topic, offset))
                wanted[(topic, broker_id, partition)] = None
        plans.append((group, plan, "bytes"))
    keys = list(wanted)
    values = await gather([offsets.latest(*key) for key in keys])
    latest = dict(zip(keys, values))
    if wanted_modern:
        latest.update(await modern.ends(list(wanted_modern)))
    now = now_s()
    for group, plan, unit in plans:
        total, per_topic, partial = 0, {}, False
        for key, topic, committed in plan:
            end = latest.get(key)
            if end is None:
                partial = True
                continue
            lag = max(end - committed, 0)
            total += lag
            per_topic[topic] = per_topic.get(topic, 0) + lag
        history.add(group, LagSample(now, total, per_topic, partial, unit))
    history.keep_only(set(groups))
    history.rounds += 1
    history.last_round_s = now_s() - started
