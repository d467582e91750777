"""View models of replicated topics (docs/replication.md): plain data, no I/O, as views.py.

A partition's row says what ZooKeeper says of it: replicas, leader and epoch, ISR, and the
marks the console and /metrics count (offline, under-replicated). The overview's figures
(each topic's counts, each broker's replicas, leaderships and under-replicated leaderships)
come from each entry's counts (replicated_entries.py), computed once per entry, so an overview
of a thousand topics sums a thousand small records rather than building every partition's row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted_broker.registry.replication_paths import PartitionState
from webui.cluster_cache import BrokerEntry
from webui.replicated_entries import ReplicatedTopicEntry, partition_offline, partition_under_replicated


def replicated_partition_row(partition: int, replicas: Sequence[int], state: PartitionState | None,
                             brokers: Mapping[int, BrokerEntry]) -> dict[str, Any]:
    """One partition of a replicated topic as ZooKeeper says it is.

    ``offline``: no leader (the state says -1, or no state is written yet), as the controller
    counts it. ``under_replicated``: it has a leader and its ISR is smaller than its replica
    list (Kafka's definition, counted here for the whole cluster). ``leader_registered`` is
    False for a leader whose broker has left ``/brokers/ids`` and that the controller has not
    replaced yet (a moment after a crash)."""
    leader = None if partition_offline(state) else state.leader
    isr = list(state.isr) if state is not None else []
    return {"partition": partition, "replicas": list(replicas), "preferred_leader": replicas[0] if replicas else None,
            "leader": leader, "leader_epoch": state.leader_epoch if state is not None else None, "isr": isr,
            "out_of_sync": [b for b in replicas if b not in isr], "down": [b for b in replicas if b not in brokers],
            "has_state": state is not None, "offline": leader is None,
            "leader_registered": leader is not None and leader in brokers,
            "under_replicated": partition_under_replicated(replicas, state)}


def replicated_partition_rows(entry: ReplicatedTopicEntry, brokers: Mapping[int, BrokerEntry]) -> list[dict[str, Any]]:
    if entry.assignment is None:
        return []
    return [replicated_partition_row(p, replicas, entry.states.get(p), brokers)
            for p, replicas in sorted(entry.assignment.replicas.items())]


def replication_summary(cluster) -> dict[str, Any]:
    """The cluster's replication at a glance: the controller, each replicated topic's row
    (factor, partitions, under-replicated and offline counts), the totals, and per broker
    (``brokers``: every broker an assignment names, registered or not) the replicas it
    holds, the partitions it leads and the under-replicated ones among them, and its topics."""
    return cluster.memo("replication_summary", lambda: _replication_summary(cluster))


def _replication_summary(cluster) -> dict[str, Any]:
    brokers = cluster.brokers()
    topics = {}
    held: dict[int, list[int]] = {}  # broker -> [topics, replicas, leaderships, under-replicated]
    for topic in cluster.replicated_topics():
        entry = cluster.replicated_topic(topic)
        if entry is None:
            continue
        counts = entry.counts
        topics[topic] = {"name": topic, "brokers": [b for b, share in counts.brokers.items() if share.replicas],
                         "partitions": counts.partitions,
                         "replication_factor": entry.replication_factor,
                         "under_replicated": counts.under_replicated, "offline": counts.offline,
                         "error": entry.error}
        for broker, share in counts.brokers.items():
            figures = held.setdefault(broker, [0, 0, 0, 0])
            figures[0] += share.replicas > 0
            figures[1] += share.replicas
            figures[2] += share.leaderships
            figures[3] += share.under_replicated
    controller = cluster.controller()
    return {"controller": None if controller is None else {
                "id": controller.broker_id, "epoch": controller.epoch, "registered": controller.broker_id in brokers},
            "topics": topics, "partitions": sum(row["partitions"] for row in topics.values()),
            "under_replicated_partitions": sum(row["under_replicated"] for row in topics.values()),
            "offline_partitions": sum(row["offline"] for row in topics.values()),
            "brokers": {b: dict(zip(("topics", "replicas", "leaderships", "under_replicated"), figures))
                        for b, figures in sorted(held.items())}}


def broker_replicated_topics(cluster, broker_id: int) -> list[dict[str, Any]]:
    """The replicated topics ``broker_id`` holds a replica of or leads, sorted, each with
    the broker's replicas, leaderships and under-replicated leaderships there."""
    rows = []
    for topic in cluster.replicated_topics():
        entry = cluster.replicated_topic(topic)
        share = entry.counts.brokers.get(broker_id) if entry is not None else None
        if share is not None:
            rows.append({"name": topic, "partitions": entry.counts.partitions, "replicas": share.replicas,
                         "leaderships": share.leaderships, "under_replicated": share.under_replicated})
    return rows


def replicated_topic_page(entry: ReplicatedTopicEntry, *, brokers: Mapping[int, BrokerEntry],
                          figures: Mapping[int, Mapping[str, Any]], groups: Sequence[str]) -> dict[str, Any]:
    """A replicated topic's partitions 0..N-1: replicas, leader, ISR, marks, and the offsets
    the leader answers (``figures`` per partition: earliest, latest, bytes_per_second, error)."""
    partitions = []
    for row in replicated_partition_rows(entry, brokers):
        figure = figures.get(row["partition"], {})
        earliest, latest = figure.get("earliest"), figure.get("latest")
        partitions.append({**row, "earliest": earliest, "latest": latest,
                           "size": latest - earliest if earliest is not None and latest is not None else None,
                           "bytes_per_second": figure.get("bytes_per_second"), "error": figure.get("error")})
    return {"topic": entry.topic, "replicated": True, "replication_factor": entry.replication_factor,
            "error": entry.error, "partitions": partitions, "groups": list(groups),
            "totals": {"partitions": len(partitions),
                       "under_replicated": sum(p["under_replicated"] for p in partitions),
                       "offline": sum(p["offline"] for p in partitions),
                       "size": sum(p["size"] for p in partitions) if partitions and all(
                           p["size"] is not None for p in partitions) else None}}
