"""View models of brokers (as views.py: plain data, no I/O): the overview's broker table and
a broker's page. Each broker's replicas, leaderships and under-replicated leaderships come from
ZooKeeper's replication state (replication_views.replication_summary); a broker that holds
replicas without being registered (down, or not started) has a row of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webui.cluster_cache import BrokerEntry
from webui.formats import paginate


NO_REPLICAS = {"topics": 0, "replicas": 0, "leaderships": 0, "under_replicated": 0}


def broker_row(entry: BrokerEntry, topics: int, replication: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A registered broker: its registration; ``topics``, the 0.7 topics it registered and
    the replicated ones it holds a replica of; ``replicas``, ``leaderships`` and
    ``under_replicated`` (the partitions it leads whose ISR is short), from ZooKeeper's
    replication state (``replication``: replication_summary's figures of the broker)."""
    held = replication or NO_REPLICAS
    return {"id": entry.broker_id, "registered": True, "host": entry.host, "port": entry.port,
            "address": f"{entry.host}:{entry.port}", "creator_id": entry.creator_id,
            "registered_ms": entry.registered_ms, "topics": topics + held["topics"], "replicas": held["replicas"],
            "leaderships": held["leaderships"], "under_replicated": held["under_replicated"]}


def _unregistered_broker_row(broker_id: int, held: Mapping[str, int]) -> dict[str, Any]:
    """A broker that assignments name but that is not registered (down, or not started)."""
    return {"id": broker_id, "registered": False, "host": None, "port": None, "address": None,
            "creator_id": None, "registered_ms": None, **held}


def broker_rows(cluster, brokers: Mapping[int, BrokerEntry],
                held: Mapping[int, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Every registered broker, and every broker that holds replicas without being registered."""
    rows = {broker_id: broker_row(entry, len(cluster.broker_topics(broker_id)), held.get(broker_id))
            for broker_id, entry in brokers.items()}
    for broker_id, figures in held.items():
        if broker_id not in rows and figures["replicas"]:
            rows[broker_id] = _unregistered_broker_row(broker_id, figures)
    return [rows[broker_id] for broker_id in sorted(rows)]


def broker_page(broker_id: int, entry: BrokerEntry | None, *, topics: Mapping[str, int],
                snapshot: Mapping[str, Any] | None, log_page: int = 1,
                replication: Mapping[str, Any] | None = None,
                replicated: Sequence[Mapping[str, Any]] = (), replicated_page: int = 1) -> dict[str, Any]:
    """A broker's registration and topics, and its 0.7 statistics when the console has them
    (it is embedded in that broker), with its modern listener's requests (``kafka_listener``,
    None without one); a standalone console cannot read them over the wire.
    ``replication`` (embedded, with ZooKeeper): server.stats.replication_snapshot, shown as is.
    ``replicated`` (replication_views.broker_replicated_topics): the replicated topics it
    holds, from ZooKeeper's state, any console; a page of them, and their sums."""
    logs = paginate(list(snapshot["logs"]) if snapshot else [], log_page)
    held = {"topics": len(replicated), **{key: sum(row[key] for row in replicated)
                                          for key in ("replicas", "leaderships", "under_replicated")}}
    return {
        "id": broker_id, "registered": entry is not None,
        "broker": broker_row(entry, len(topics), held) if entry else None,
        "held": held, "replicated_topics": paginate(replicated, replicated_page),
        "topics": [{"name": topic, "partitions": count} for topic, count in topics.items()],
        "has_stats": snapshot is not None,
        "stats": None if snapshot is None else {
            "socket_server": snapshot["socket_server"], "kafka_listener": snapshot.get("kafka_listener"),
            "all_topics": snapshot["all_topics"], "topics": snapshot["topics"], "log_flush": snapshot["log_flush"]},
        "logs": logs,
        "replication": replication,
    }
