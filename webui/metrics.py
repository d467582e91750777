"""``/metrics``: the console's and (embedded) the broker's figures in Prometheus text format.

A registry of our own, not prometheus_client's global one, so two consoles in one process
(tests) never share series. One custom collector reads, at scrape time, what the console
already holds: the registry cache (counts), the last lag sample of each group, the
rebalance check, the cache's ZooKeeper counters, and the embedded broker's
``broker_snapshot`` (the 0.7 beans: SocketServerStats, BrokerTopicStat, LogFlushStats, per-log
figures). A scrape asks no broker and no ZooKeeper anything. Page timings are a Histogram.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from webui.views import rebalance_health

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

    def _console(self) -> Iterator[Metric]:
        model, cluster = self._model, self._model.cluster
        for name, help_text, value in [
                ("brokers", "Brokers registered in ZooKeeper", len(cluster.brokers())),
                ("topics", "Topics registered", len(cluster.topics())),
                ("partitions", "Partitions of all topics on all brokers", cluster.partition_count()),
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
                for topic, value in sorted(last.per_topic.items()):
                    lag.add_metric([group, topic], value)
        yield from (lag, healthy, consumers)


def _broker(broker_id: int, snapshot: dict) -> Iterator[Metric]:
    """The 0.7 beans of the broker the console is embedded in."""
    broker = str(broker_id)
    server = snapshot["socket_server"]
    requests = CounterMetricFamily(f"{PREFIX}_broker_requests", "Requests handled, by type (SocketServerStats)",
                                   labels=["broker", "request"])
    rate = GaugeMetricFamily(f"{PREFIX}_broker_request_rate", "Requests per second in the last monitoring window",
                             labels=["broker", "request"])
    avg = GaugeMetricFamily(f"{PREFIX}_broker_request_avg_ms", "Average handling time", labels=["broker", "request"])
    top = GaugeMetricFamily(f"{PREFIX}_broker_request_max_ms", "Longest handling time", labels=["broker", "request"])
    for name, figures in server["requests"].items():
        requests.add_metric([broker, name], figures["count"])
        rate.add_metric([broker, name], figures["per_second"])
        avg.add_metric([broker, name], figures["avg_ms"])
        top.add_metric([broker, name], figures["max_ms"])
    yield from (requests, rate, avg, top)
    for name, help_text in [("bytes_read", "Bytes read from clients"), ("bytes_written", "Bytes written to clients"),
                            ("connections_total", "Connections accepted")]:
        family = CounterMetricFamily(f"{PREFIX}_broker_{name.removesuffix('_total')}", help_text, labels=["broker"])
        family.add_metric([broker], server[name])
        yield family
    connections = GaugeMetricFamily(f"{PREFIX}_broker_connections", "Open client connections", labels=["broker"])
    connections.add_metric([broker], server["connections"])
    yield connections
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
