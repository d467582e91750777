"""View models of the console's pages: plain data (dicts, lists, numbers, strings), no I/O.

Each page function returns one dict that the page's template renders and its ``/api/`` twin
serves as JSON, so the two never disagree. Escaping is the templates' business (Jinja2
autoescaping); these functions never build HTML. Everything a user or a client wrote (topic
names, group and consumer ids, registrations, payloads) passes through as data.

Also here: pagination, the rebalance check of 0.7's VerifyConsumerRebalance, the payload
display (text or hex), and the number formats the templates use; the lag chart's geometry is
in lag_chart.py, replicated topics' views in replication_views.py, brokers' in
broker_views.py.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted_broker.client.modern_lookup import GroupMembers
from twisted_broker.client.topic_filter import topic_filter_for
from twisted_broker.registry import paths, rebalance
from webui.broker_views import broker_page, broker_row, broker_rows  # noqa: F401 (importable from here)
from webui.cluster_cache import BrokerEntry, ConsumerEntry, GroupState
from webui.formats import PAGE_SIZE, paginate  # noqa: F401 (importable from here)
from webui.formats import human_bytes, thousands, utc_time  # noqa: F401 (the templates' filters)
from webui.lag_chart import lag_chart
from webui.lag_history import LagSample
from webui.message_browser import BrowsedMessage, BrowseResult
# The replicated topics' views, importable from here like every page's.
from webui.replication_views import (  # noqa: F401 (importable from here)
    broker_replicated_topics, replicated_partition_row, replicated_partition_rows, replicated_topic_page,
    replication_summary,
)

BROWSER_PAYLOAD_PREVIEW_BYTES = 4096
FORMATS = ("auto", "text", "hex")

def _matching(names: Sequence[str], query: str) -> Sequence[str]:
    if not query:
        return names
    folded = query.casefold()
    return [name for name in names if folded in name.casefold()]


# -- overview -------------------------------------------------------------------------------


def overview_page(cluster, history, *, topic_page: int = 1, topic_query: str = "",
                  group_limit: int = 20) -> dict[str, Any]:
    """The cluster at a glance: brokers, a page of topics, the first groups, totals."""
    brokers = cluster.brokers()
    replication = replication_summary(cluster)
    topics = _matching(cluster.all_topics(), topic_query)
    topic_rows = paginate(topics, topic_page)
    topic_rows["items"] = [replication["topics"].get(topic) or _topic_row(cluster, topic)
                           for topic in topic_rows["items"]]
    groups = cluster.groups()
    return {
        "zk_connect": cluster.zk_connect, "synced": cluster.synced, "has_registry": cluster.has_registry,
        "totals": {"brokers": len(brokers), "topics": len(cluster.all_topics()),
                   "partitions": cluster.partition_count() + replication["partitions"], "groups": len(groups),
                   "consumers": cluster.consumer_count(), "replicated_topics": len(replication["topics"]),
                   "under_replicated_partitions": replication["under_replicated_partitions"],
                   "offline_partitions": replication["offline_partitions"]},
        "controller": replication["controller"],
        "brokers": broker_rows(cluster, brokers, replication["brokers"]),
        "topics": topic_rows, "topic_query": topic_query,
        "groups": [_group_summary(cluster, history, group, with_health=False) for group in groups[:group_limit]],
        "more_groups": max(0, len(groups) - group_limit),
    }


def _topic_row(cluster, topic: str) -> dict[str, Any]:
    counts = cluster.topic_brokers(topic)
    return {"name": topic, "brokers": sorted(counts), "partitions": sum(counts.values()),
            "replication_factor": None, "under_replicated": 0, "offline": 0}


# -- consumer groups ------------------------------------------------------------------------


def _group_summary(cluster, history, group: str, *, with_health: bool) -> dict[str, Any]:
    state = cluster.group(group) or GroupState(group)
    last = history.last(group)
    row = {"name": group, "kind": "0.7" if state.registered else "kafka", "consumers": len(state.consumers),
           "topics": state.topics, "lag": last.total if last else None,
           "lag_unit": "bytes" if state.registered else "offsets", "lag_partial": bool(last and last.partial),
           "lag_sampled_s": last.time_s if last else None}
    if with_health:  # a Kafka clients' group's health is its coordinator's: asked on its own page
        row["health"] = (rebalance_health(state, cluster.topics(), cluster.topic_brokers)["status"]
                         if state.registered else "kafka")
    return row


def groups_page(cluster, history, *, page: int = 1, query: str = "") -> dict[str, Any]:
    """A page of groups: consumers, topics, rebalance health, last sampled lag."""
    rows = paginate(_matching(cluster.groups(), query), page)
    rows["items"] = [_group_summary(cluster, history, group, with_health=True) for group in rows["items"]]
    return {"groups": rows, "query": query, "synced": cluster.synced}


def topic_counts(subscription: paths.Subscription, topics: Sequence[str]) -> dict[str, int]:
    """``{topic: streams}`` of one registration; a filter is expanded over ``topics``.
    Raises ValueError for a filter regex that does not compile."""
    if isinstance(subscription, paths.StaticSubscription):
        return dict(subscription.topic_counts)
    topic_filter = topic_filter_for(subscription)
    return {topic: subscription.streams for topic in topics if topic_filter.is_topic_allowed(topic)}


def _consumer_row(entry: ConsumerEntry, topics: Sequence[str]) -> dict[str, Any]:
    subscription = entry.subscription
    row: dict[str, Any] = {"id": entry.consumer_id, "registration": entry.registration,
                           "registered_ms": entry.registered_ms, "error": entry.error,
                           "kind": "unreadable", "pattern": None, "streams": None, "topics": {}}
    if isinstance(subscription, paths.StaticSubscription):
        row.update(kind="static", topics=dict(subscription.topic_counts),
                   streams=sum(subscription.topic_counts.values()))
    elif isinstance(subscription, paths.WildcardSubscription):
        row.update(kind="whitelist" if subscription.whitelist else "blacklist", pattern=subscription.regex,
                   streams=subscription.streams)
        try:
            row["topics"] = topic_counts(subscription, topics)
        except ValueError as exc:
            row["error"] = str(exc)
    return row


def rebalance_health(state: GroupState, topics: Sequence[str],
                     topic_brokers: Callable[[str], Mapping[int, int]]) -> dict[str, Any]:
    """0.7's VerifyConsumerRebalance: every partition of every subscribed topic is owned by
    exactly one live consumer thread subscribed to it.

    ``status`` is ``ok``, ``unbalanced`` (``problems`` says why; also seen for a moment during
    every rebalance), or ``stopped`` (no consumer registered and no owner left).
    """
    problems: list[str] = []
    counts_by_consumer: dict[str, dict[str, int]] = {}
    for consumer_id, entry in sorted(state.consumers.items()):
        if entry.subscription is None:
            problems.append(f"the registration of {consumer_id} cannot be read: {entry.error}")
            continue
        try:
            counts_by_consumer[consumer_id] = topic_counts(entry.subscription, topics)
        except ValueError as exc:
            problems.append(f"the topic filter of {consumer_id} cannot be read: {exc}")
    threads = rebalance.consumers_per_topic(counts_by_consumer)
    owned = {topic: owners for topic, owners in state.owners.items() if owners}
    if not state.consumers and not owned:
        return {"status": "stopped", "problems": problems}
    for topic in sorted(threads):
        owners = state.owners.get(topic, {})
        live = set(threads[topic])
        for name in rebalance.partition_names(topic_brokers(topic)):
            owner = owners.get(name)
            if owner is None:
                problems.append(f"{topic} {name} has no owner")
            elif owner not in live:
                problems.append(f"{topic} {name} is owned by {owner}, which is not a live consumer thread of {topic}")
    for topic in sorted(set(owned) - set(threads)):
        for name, owner in sorted(owned[topic].items()):
            problems.append(f"{topic} {name} is owned by {owner}, but no live consumer subscribes to {topic}")
    return {"status": "unbalanced" if problems else "ok", "problems": problems}


def group_page(state: GroupState, *, topics: Sequence[str], topic_brokers: Callable[[str], Mapping[int, int]],
               latest: Mapping[tuple[str, str], int | None], samples: Sequence[LagSample],
               now_s: float, partition_names: Callable[[str], Iterable[str]] | None = None,
               members: GroupMembers | None = None) -> dict[str, Any]:
    """One group: consumers and subscriptions (or a Kafka clients' group's members), per
    partition owner, offsets and lag, health, and the lag history chart.

    ``latest`` is keyed by (topic, partition name): 0.7's latest offset for a 0.7 group, the
    modern end for a group of Kafka clients (``state.registered`` False), whose lag then
    is Kafka's (in offsets). ``partition_names(topic)`` lists a topic's partitions (default: its 0.7
    broker-partitions); ``members`` is the coordinator's description of a Kafka clients' group.
    """
    kafka_group = not state.registered
    consumers = [_consumer_row(entry, topics) for _id, entry in sorted(state.consumers.items())]
    subscribed: dict[str, list[str]] = {}
    for row in consumers:
        for topic, count in row["topics"].items():
            subscribed.setdefault(topic, []).extend(
                paths.thread_id(row["id"], index) for index in range(count))
    live_threads = {thread for threads in subscribed.values() for thread in threads}
    names_of = partition_names or (lambda topic: rebalance.partition_names(topic_brokers(topic)))
    partitions = []
    total_lag, lag_known = 0, True
    for topic in sorted(set(subscribed) | set(state.topics)):
        names = set(names_of(topic))
        committed = state.offsets.get(topic, {})
        owners = state.owners.get(topic, {})
        if kafka_group:
            owners = _member_owners(members, topic, names_of(topic))
        assigned: dict[str, str] = {}
        if subscribed.get(topic):
            for thread, owned in rebalance.assign(subscribed[topic], names).items():
                assigned.update(dict.fromkeys(owned, thread))
        for name in sorted(names | set(committed) | set(owners), key=_partition_key):
            try:
                broker_id, partition = paths.parse_partition_name(name)
            except ValueError:
                broker_id = partition = None
            end = latest.get((topic, name))
            offset = committed.get(name)
            lag = end - offset if end is not None and offset is not None else None
            if lag is None:
                lag_known = False
            else:
                total_lag += lag
            owner = owners.get(name)
            partitions.append({
                "topic": topic, "partition": name, "broker": broker_id, "partition_id": partition,
                "registered": name in names, "owner": owner, "owner_live": kafka_group or owner in live_threads,
                "assigned": assigned.get(name), "committed": offset, "latest": end, "lag": lag})
    health = _members_health(members) if kafka_group else rebalance_health(state, topics, topic_brokers)
    return {
        "group": state.group, "kind": "kafka" if kafka_group else "0.7",
        "lag_unit": "offsets" if kafka_group else "bytes",
        "consumers": consumers, "members": _member_rows(members),
        "coordinator_state": members.state if members is not None else None,
        "topics": sorted(set(subscribed) | set(state.topics)),
        "partitions": partitions, "health": health,
        "lag": {"total": total_lag, "complete": lag_known},
        "history": [[round(sample.time_s, 3), sample.total] for sample in samples],
        "chart": lag_chart(samples, now_s, unit="offsets" if kafka_group else "bytes"),
    }


def _member_owners(members: GroupMembers | None, topic: str, names: Iterable[str]) -> dict[str, str]:
    """``{partition name: member id}`` of a Kafka clients' group; names in modern order."""
    if members is None:
        return {}
    by_number = members.owners(topic)
    return {name: by_number[number] for number, name in enumerate(names) if number in by_number}


def _member_rows(members: GroupMembers | None) -> list[dict[str, Any]]:
    if members is None:
        return []
    return [{"id": m.member_id, "client_id": m.client_id, "host": m.client_host,
             "partitions": {topic: sorted(found) for topic, found in sorted(m.assignment.items())}}
            for m in sorted(members.members, key=lambda m: m.member_id)]


# Kafka's group states, as the console's badges show them.
_STATE_HEALTH = {"Stable": "ok", "Empty": "stopped", "Dead": "stopped",
                 "PreparingRebalance": "unbalanced", "CompletingRebalance": "unbalanced"}


def _members_health(members: GroupMembers | None) -> dict[str, Any]:
    """A Kafka clients' group's health from its coordinator's state: Stable is ok, Empty or
    Dead stopped, a rebalance under way unbalanced."""
    if members is None:
        return {"status": "stopped", "problems": ["no coordinator answered: members unknown"]}
    status = _STATE_HEALTH.get(members.state, "unbalanced")
    problems = [f"the group is rebalancing ({members.state})"] if status == "unbalanced" else []
    return {"status": status, "problems": problems}


def _partition_key(name: str) -> tuple:
    try:
        return (0, *paths.parse_partition_name(name))
    except ValueError:
        return (1, name)


# -- lag chart ------------------------------------------------------------------------------


def topic_page(topic: str, *, counts: Mapping[int, int], brokers: Mapping[int, BrokerEntry],
               figures: Mapping[tuple[int, int], Mapping[str, Any]], groups: Sequence[str]) -> dict[str, Any]:
    """Every broker-partition of ``topic`` with its offsets, size, segments and rates."""
    partitions = []
    for broker_id, count in counts.items():
        for partition in range(count):
            figure = dict(figures.get((broker_id, partition), {}))
            partitions.append({"broker": broker_id, "partition": partition,
                               "name": paths.partition_name(broker_id, partition),
                               "broker_registered": broker_id in brokers,
                               "earliest": figure.get("earliest"), "latest": figure.get("latest"),
                               "size": figure.get("size"), "segments": figure.get("segments"),
                               "bytes_per_second": figure.get("bytes_per_second"),
                               "messages_per_second": figure.get("messages_per_second"),
                               "source": figure.get("source", "wire"), "error": figure.get("error")})
    sizes = [p["size"] for p in partitions]
    message_rates = [p["messages_per_second"] for p in partitions]
    return {"topic": topic, "replicated": False, "partitions": partitions, "groups": list(groups),
            "totals": {"partitions": len(partitions),
                       "size": sum(sizes) if sizes and None not in sizes else None,
                       "bytes_per_second": sum(rates) if (rates := [p["bytes_per_second"] for p in partitions
                                                                      if p["bytes_per_second"] is not None]) else None,
                       # Only brokers count messages: a sum over some partitions would pass for the topic's.
                       "messages_per_second": sum(message_rates) if message_rates and None not in message_rates
                       else None}}


# -- messages -------------------------------------------------------------------------------


def payload_view(payload: bytes, fmt: str = "auto", limit: int = BROWSER_PAYLOAD_PREVIEW_BYTES) -> dict[str, Any]:
    """A payload for display: ``text`` if asked or if it is printable UTF-8, else ``hex``; at
    most ``limit`` bytes. The text is returned as is: the template escapes it."""
    shown = payload[:limit]
    text = None
    if fmt != "hex":
        try:
            text = shown.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A cut in the middle of a character is still text.
            if len(payload) > limit and exc.start >= len(shown) - 3:
                text = shown[:exc.start].decode("utf-8")
        if text is not None and fmt == "auto" and any(
                (ord(c) < 32 and c not in "\t\n\r") or c == "\x7f" for c in text):
            text = None
        if text is None and fmt == "text":
            text = shown.decode("utf-8", "backslashreplace")
    if text is not None:
        return {"format": "text", "text": text, "bytes": len(payload), "shown": len(shown),
                "truncated": len(payload) > limit,
                "base64": base64.b64encode(shown).decode("ascii")}
    lines = [f"{i:08x}  {shown[i:i + 16].hex(' ', -4)}" for i in range(0, len(shown), 16)]
    return {"format": "hex", "text": "\n".join(lines), "bytes": len(payload), "shown": len(shown),
            "truncated": len(payload) > limit,
            "base64": base64.b64encode(shown).decode("ascii")}


def message_row(message: BrowsedMessage, fmt: str, limit: int = BROWSER_PAYLOAD_PREVIEW_BYTES) -> dict[str, Any]:
    return {"offset": message.offset, "next_offset": message.next_offset, "size": message.size,
            "magic": message.magic, "codec": message.codec, "crc": f"{message.crc:#010x}",
            "valid": message.valid, "payload": payload_view(message.payload, fmt, limit),
            "inner": [message_row(inner, fmt, limit) for inner in message.inner],
            "inner_error": message.inner_error}


def messages_page(topic: str, broker_id: int, partition: int, result: BrowseResult | None, *,
                  earliest: int | None, latest: int | None, mode: str, fmt: str, count: int,
                  problem: str | None = None) -> dict[str, Any]:
    """A page of a broker-partition's messages with the links to the pages around it."""
    messages = [message_row(m, fmt) for m in result.messages] if result else []
    start = result.start if result else None
    end = result.end if result else None
    return {
        "topic": topic, "broker": broker_id, "partition": partition,
        "name": paths.partition_name(broker_id, partition), "mode": mode, "format": fmt, "count": count,
        "earliest": earliest, "latest": latest, "start": start, "end": end, "messages": messages,
        "problem": problem or (result.problem if result else None),
        "older": start if start is not None and earliest is not None and start > earliest else None,
        "newer": end if end is not None and latest is not None and end < latest else None,
    }
