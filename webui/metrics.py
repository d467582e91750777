"""``/metrics``: the console's and (embedded) the broker's figures in Prometheus text format.

A registry of our own, not prometheus_client's global one, so two consoles in one process
(tests) never share series. One custom collector reads, at scrape time, what the console
already holds: the registry cache (counts), the last lag sample of each group, the
rebalance check, the cache's ZooKeeper counters, replication as ZooKeeper holds it (the
``twisted_broker_cluster_*`` controller, under-replicated and offline partitions: the same on
every console), and the embedded broker's ``broker_snapshot`` (the 0.7 beans:
SocketServerStats, BrokerTopicStat, LogFlushStats, per-log figures; the modern listener's
requests as ``twisted_broker_broker_kafka_*``) and
``replication_snapshot`` (this broker's leaderships, ISR changes, controller, lags). A scrape
asks no broker and no ZooKeeper anything. Page timings are a Histogram.

Lag follows Kafka's two views: ``twisted_broker_follower_lag_bytes`` is measured by a follower
(bytes behind what its leader last reported as its log end, Kafka's replica fetcher lag),
``twisted_broker_replica_lag_bytes`` by a leader for each of its followers (bytes between the
follower's last fetch position and the leader's log end; absent before its first fetch), so
a follower that is dead still shows, on its leader, how far behind it is.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from webui.views import rebalance_health, replication_summary

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "twisted_broker"


class ConsoleMetrics:
    """The registry ``/metrics`` serves, and the page-time histogram the app records into."""

    def __init__(self, model) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.page_seconds = Histogram(f"{PREFIX}_console_page_seconds", "Time to answer a console page, by route",
                                      ["route"], registry=self.registry,
                                      buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.registry.register(_Collector(model))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    def __init__(self, model) -> None:
        self._model = model

    def collect(self) -> Iterator[Metric]:
        yield from self._console()
        local = self._model.local_broker
        if local is not None:
            yield from _broker(local.broker_id, self._model.broker_snapshot(local.broker_id))
            replication = self._model.broker_replication(local.broker_id)
            if replication is not None:
                yield from _broker_replication(local.broker_id, replication)

    def _console(self) -> Iterator[Metric]:
        model, cluster = self._model, self._model.cluster
        replication = replication_summary(cluster)
        controller = replication["controller"]
        for name, help_text, value in [
                ("brokers", "Brokers registered in ZooKeeper", len(cluster.brokers())),
                ("topics", "Topics registered (0.7 and replicated)", len(cluster.all_topics())),
                ("partitions", "Partitions of all 0.7 topics on all brokers, and of all replicated topics",
                 cluster.partition_count() + replication["partitions"]),
                ("replicated_topics", "Replicated topics", len(replication["topics"])),
                ("under_replicated_partitions", "Partitions with a leader and fewer in-sync replicas than "
                 "replicas (ZooKeeper's states)", replication["under_replicated_partitions"]),
                ("offline_partitions", "Partitions without a leader (ZooKeeper's states)",
                 replication["offline_partitions"]),
                ("controller", "Broker id of the controller (-1: none)", -1 if controller is None else controller["id"]),
                ("groups", "Consumer groups", len(cluster.groups())),
                ("consumers", "Consumers registered in all groups", cluster.consumer_count()),
                ("registry_synced", "1 once the console has read the whole registry", int(cluster.synced))]:
            yield GaugeMetricFamily(f"{PREFIX}_cluster_{name}", help_text, value=value)
        mirror = getattr(cluster, "mirror", None)
        if mirror is not None:
            yield CounterMetricFamily(f"{PREFIX}_console_zookeeper_reads", "ZooKeeper reads by the console's cache",
                                      value=mirror.reads)
            yield CounterMetricFamily(f"{PREFIX}_console_zookeeper_watch_events",
                                      "ZooKeeper watch events the console's cache received",
                                      value=mirror.watch_events)
        yield CounterMetricFamily(f"{PREFIX}_console_broker_requests", "Requests the console sent to brokers",
                                  value=model.clients.requests)
        yield CounterMetricFamily(f"{PREFIX}_console_lag_rounds", "Lag sampling rounds", value=model.history.rounds)
        lag = GaugeMetricFamily(f"{PREFIX}_group_lag_bytes", "Bytes between the committed and the latest "
                                "offset, summed per topic, at the last sample", labels=["group", "topic"])
        lag_offsets = GaugeMetricFamily(f"{PREFIX}_group_lag_offsets", "Of a group of Kafka clients: the modern "
                                        "end minus the committed offset (Kafka's consumer lag), summed per "
                                        "topic, at the last sample", labels=["group", "topic"])
        healthy = GaugeMetricFamily(f"{PREFIX}_group_rebalance_ok", "1 if every partition is owned by one live "
                                    "consumer (VerifyConsumerRebalance); 0 if not; absent if stopped",
                                    labels=["group"])
        consumers = GaugeMetricFamily(f"{PREFIX}_group_consumers", "Registered consumers of the group",
                                      labels=["group"])
        for group in cluster.groups():
            state = cluster.group(group)
            if state is None:
                continue
            consumers.add_metric([group], len(state.consumers))
            status = rebalance_health(state, cluster.topics(), cluster.topic_brokers)["status"]
            if status != "stopped":
                healthy.add_metric([group], 1 if status == "ok" else 0)
            last = model.history.last(group)
            if last is not None:
                family = lag_offsets if last.unit == "offsets" else lag
                for topic, value in sorted(last.per_topic.items()):
                    family.add_metric([group, topic], value)
        yield from (lag, lag_offsets, healthy, consumers)


def _quota_figures(broker: str, listener: dict) -> Iterator[Metric]:
    """Quotas' throttles per (quota, user, client id) and connections refused per address
    (docs/security.md, "Quotas")."""
    labels = ["broker", "quota", "user", "client_id"]
    throttled = CounterMetricFamily(f"{PREFIX}_broker_kafka_throttled", "answers throttled by a client quota",
                                    labels=labels)
    throttle_ms = CounterMetricFamily(f"{PREFIX}_broker_kafka_throttle_time_ms", "throttle time of client quotas, ms",
                                      labels=labels)
    for row in listener.get("throttles", ()):
        throttled.add_metric([broker, row["quota"], row["user"], row["client_id"]], row["throttled"])
        throttle_ms.add_metric([broker, row["quota"], row["user"], row["client_id"]], row["throttle_time_ms"])
    refused = CounterMetricFamily(f"{PREFIX}_broker_kafka_refused_connections",
                                  "connections refused by max.connections.per.ip", labels=["broker"])
    refused.add_metric([broker], listener.get("refused_connections", 0))
    yield from (throttled, throttle_ms, refused)


def _broker(broker_id: int, snapshot: dict) -> Iterator[Metric]:
    """The 0.7 beans of the broker the console is embedded in."""
    broker = str(broker_id)
    yield from _socket_server(broker, snapshot["socket_server"], f"{PREFIX}_broker", "request",
                              "(SocketServerStats)", "clients")
    if snapshot.get("kafka_listener") is not None:  # the modern listener's own request figures
        yield from _socket_server(broker, snapshot["kafka_listener"], f"{PREFIX}_broker_kafka", "api",
                                  "of today's Kafka clients", "Kafka clients")
        failed = CounterMetricFamily(f"{PREFIX}_broker_kafka_failed_authentications",
                                     "SASL logins refused (docs/security.md)", labels=["broker"])
        failed.add_metric([broker], snapshot["kafka_listener"].get("failed_authentications", 0))
        yield failed
        yield from _quota_figures(broker, snapshot["kafka_listener"])
    topic_stats = {"messages_in": "Messages appended", "bytes_in": "Bytes appended", "bytes_out": "Bytes fetched",
                   "failed_produce_requests": "Produce requests that failed",
                   "failed_fetch_requests": "Fetch requests that failed"}
    for name, help_text in topic_stats.items():
        family = CounterMetricFamily(f"{PREFIX}_broker_topic_{name}", f"{help_text} (BrokerTopicStat; "
                                     "topic=\"\" is all topics)", labels=["broker", "topic"])
        family.add_metric([broker, ""], snapshot["all_topics"][name])
        for topic, figures in snapshot["topics"].items():
            family.add_metric([broker, topic], figures[name])
        yield family
    flush = snapshot["log_flush"]
    flushes = CounterMetricFamily(f"{PREFIX}_broker_log_flushes", "fsyncs of logs (LogFlushStats)", labels=["broker"])
    flushes.add_metric([broker], flush["flushes"])
    flush_avg = GaugeMetricFamily(f"{PREFIX}_broker_log_flush_avg_ms", "Average fsync time", labels=["broker"])
    flush_avg.add_metric([broker], flush["avg_ms"])
    flush_max = GaugeMetricFamily(f"{PREFIX}_broker_log_flush_max_ms", "Longest fsync time", labels=["broker"])
    flush_max.add_metric([broker], flush["max_ms"])
    yield from (flushes, flush_avg, flush_max)
    labels = ["broker", "topic", "partition"]
    size = GaugeMetricFamily(f"{PREFIX}_broker_log_size_bytes", "Bytes in the log's segments (LogStats)", labels=labels)
    segments = GaugeMetricFamily(f"{PREFIX}_broker_log_segments", "Segments of the log", labels=labels)
    end = GaugeMetricFamily(f"{PREFIX}_broker_log_end_offset", "The log's current end offset", labels=labels)
    appended = CounterMetricFamily(f"{PREFIX}_broker_log_messages_appended", "Messages appended since the start",
                                   labels=labels)
    for figures in snapshot["logs"]:
        key = [broker, figures["topic"], str(figures["partition"])]
        size.add_metric(key, figures["size"])
        segments.add_metric(key, figures["segments"])
        end.add_metric(key, figures["current_offset"])
        appended.add_metric(key, figures["messages_appended"])
    yield from (size, segments, end, appended)


def _socket_server(broker: str, server: dict, prefix: str, label: str, of: str, peers: str) -> Iterator[Metric]:
    """One listener's RequestStats snapshot: requests by ``label`` (rate, times), bytes, connections."""
    labels = ["broker", label]
    requests = CounterMetricFamily(f"{prefix}_requests", f"Requests handled, by {label} {of}", labels=labels)
    rate = GaugeMetricFamily(f"{prefix}_request_rate", "Requests per second in the last monitoring window",
                             labels=labels)
    avg = GaugeMetricFamily(f"{prefix}_request_avg_ms", "Average handling time", labels=labels)
    top = GaugeMetricFamily(f"{prefix}_request_max_ms", "Longest handling time", labels=labels)
    for name, figures in server["requests"].items():
        requests.add_metric([broker, name], figures["count"])
        rate.add_metric([broker, name], figures["per_second"])
        avg.add_metric([broker, name], figures["avg_ms"])
        top.add_metric([broker, name], figures["max_ms"])
    yield from (requests, rate, avg, top)
    for name, help_text in [("bytes_read", f"Bytes read from {peers}"), ("bytes_written", f"Bytes written to {peers}"),
                            ("connections_total", f"Connections of {peers} accepted")]:
        family = CounterMetricFamily(f"{prefix}_{name.removesuffix('_total')}", help_text, labels=["broker"])
        family.add_metric([broker], server[name])
        yield family
    connections = GaugeMetricFamily(f"{prefix}_connections", f"Open connections of {peers}", labels=["broker"])
    connections.add_metric([broker], server["connections"])
    yield connections


def _broker_replication(broker_id: int, figures: dict) -> Iterator[Metric]:
    """This broker's replication (server.stats.replication_snapshot), Kafka's broker metrics."""
    broker = str(broker_id)
    controller = figures["controller"]
    for name, help_text, value in [
            ("under_replicated_partitions", "Partitions led here whose ISR is smaller than their replica list",
             figures["under_replicated_partitions"]),
            ("offline_partitions", "Partitions without a leader, as the controller counts them (0 on other brokers)",
             controller["offline_partitions"]),
            ("leader_count", "Partitions led by this broker", figures["leader_count"]),
            ("offline_replicas", "Replicas given up here because their log failed on disk (KIP-112)",
             figures["offline_replicas"]),
            ("replicas", "Replicas held by this broker", len(figures["replicas"])),
            ("controller", "1 if this broker is the controller", int(controller["active"]))]:
        family = GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=["broker"])
        family.add_metric([broker], value)
        yield family
    if controller["epoch"] is not None:
        family = GaugeMetricFamily(f"{PREFIX}_controller_epoch", "The controller epoch (on the controller only)",
                                   labels=["broker"])
        family.add_metric([broker], controller["epoch"])
        yield family
    for name, help_text, value in [
            ("isr_shrinks", "Followers this broker dropped from the ISR of a partition it leads", figures["isr_shrinks"]),
            ("isr_expands", "Followers this broker added back to the ISR of a partition it leads",
             figures["isr_expands"]),
            ("not_enough_replicas", "acks=all writes refused: ISR below min.insync.replicas",
             figures["not_enough_replicas"]),
            ("controller_elections", "Leader changes this broker made as controller", controller["elections"]),
            ("replication_event_errors", "Replication events that raised (logged; the others were handled)",
             figures["event_errors"]),
            ("controller_fenced_writes", "Writes of this broker's controller refused by a newer controller's epoch",
             controller["fenced_writes"])]:
        family = CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=["broker"])
        family.add_metric([broker], value)
        yield family
    follower = GaugeMetricFamily(f"{PREFIX}_follower_lag_bytes", "On a follower: bytes behind its leader's log end "
                                 "(as the leader last said)", labels=["broker", "topic", "partition", "leader"])
    replica = GaugeMetricFamily(f"{PREFIX}_replica_lag_bytes", "On a leader: bytes each follower is behind its "
                                "log end", labels=["broker", "topic", "partition", "follower"])
    isr = GaugeMetricFamily(f"{PREFIX}_partition_in_sync_replicas", "On a leader: size of the partition's ISR",
                            labels=["broker", "topic", "partition"])
    for row in figures["replicas"]:
        key = [broker, row["topic"], str(row["partition"])]
        if row["lag_bytes"] is not None:
            follower.add_metric([*key, str(row["leader"])], row["lag_bytes"])
        if row["role"] == "leader":
            isr.add_metric(key, len(row["isr"]))
            for follower_id, lag in row["follower_lag_bytes"].items():
                if lag is not None:
                    replica.add_metric([*key, str(follower_id)], lag)
    yield from (follower, replica, isr)
