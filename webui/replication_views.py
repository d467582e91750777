"""View models of replicated topics (docs/replication.md): plain data, no I/O, as views.py.

A partition's row says what ZooKeeper says of it: replicas, leader and epoch, ISR, and the
marks the console and /metrics count (offline, under-replicated).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted_broker.registry.replication_paths import PartitionState
from webui.cluster_cache import BrokerEntry, ReplicatedTopicEntry


def replicated_partition_row(partition: int, replicas: Sequence[int], state: PartitionState | None,
                             brokers: Mapping[int, BrokerEntry]) -> dict[str, Any]:
    """One partition of a replicated topic as ZooKeeper says it is.

    ``offline``: no leader (the state says -1, or no state is written yet), as the controller
    counts it. ``under_replicated``: it has a leader and its ISR is smaller than its replica
    list (Kafka's definition, counted here for the whole cluster). ``leader_registered`` is
    False for a leader whose broker has left ``/brokers/ids`` and that the controller has not
    replaced yet (a moment after a crash)."""
    leader = state.leader if state is not None and state.online else None
    isr = list(state.isr) if state is not None else []
    return {"partition": partition, "replicas": list(replicas), "preferred_leader": replicas[0] if replicas else None,
            "leader": leader, "leader_epoch": state.leader_epoch if state is not None else None, "isr": isr,
            "out_of_sync": [b for b in replicas if b not in isr], "down": [b for b in replicas if b not in brokers],
            "has_state": state is not None, "offline": leader is None,
            "leader_registered": leader is not None and leader in brokers,
            "under_replicated": leader is not None and len(isr) < len(replicas)}


def replicated_partition_rows(entry: ReplicatedTopicEntry, brokers: Mapping[int, BrokerEntry]) -> list[dict[str, Any]]:
    if entry.assignment is None:
        return []
    return [replicated_partition_row(p, replicas, entry.states.get(p), brokers)
            for p, replicas in sorted(entry.assignment.replicas.items())]


def replication_summary(cluster) -> dict[str, Any]:
    """The cluster's replication at a glance: the controller, each replicated topic's row
    (factor, partitions, under-replicated and offline counts), and the totals."""
    brokers = cluster.brokers()
    topics = {}
    for topic in cluster.replicated_topics():
        entry = cluster.replicated_topic(topic)
        if entry is None:
            continue
        rows = replicated_partition_rows(entry, brokers)
        topics[topic] = {"name": topic, "brokers": sorted({b for row in rows for b in row["replicas"]}),
                         "partitions": len(rows), "replication_factor": entry.replication_factor,
                         "under_replicated": sum(row["under_replicated"] for row in rows),
                         "offline": sum(row["offline"] for row in rows), "error": entry.error}
    controller = cluster.controller()
    return {"controller": None if controller is None else {
                "id": controller.broker_id, "epoch": controller.epoch, "registered": controller.broker_id in brokers},
            "topics": topics, "partitions": sum(row["partitions"] for row in topics.values()),
            "under_replicated_partitions": sum(row["under_replicated"] for row in topics.values()),
            "offline_partitions": sum(row["offline"] for row in topics.values())}


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
