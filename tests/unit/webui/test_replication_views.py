"""Replication in the console: ZooKeeper's /replication paths mirrored (a node with a value and
children), parsed by ClusterCache, summed by the view models, rendered inert, and exported
to /metrics (the cluster's view from ZooKeeper, and the embedded broker's own figures)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.webui.test_rendering import TOPIC, Clock, FakeLogs, assert_inert, render
from tests.unit.webui.test_zk_mirror import FakeZooKeeper
from twisted_broker.registry.replication_paths import ControllerInfo, PartitionState, TopicAssignment, state_path, topic_path
from twisted_broker.server.stats import BrokerStats, RequestStats, broker_snapshot
from webui.broker_offsets import BrokerClients, OffsetBook
from webui.cluster_cache import ClusterCache
from webui.lag_history import LagHistory
from webui.metrics import ConsoleMetrics
from webui.model import ConsoleModel, LocalBroker
from webui.views import (
    broker_page, broker_replicated_topics, overview_page, replicated_topic_page, replication_summary,
)

ASSIGNMENT = TopicAssignment({0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1)})
STATES = {0: PartitionState(0, 3, (0, 1, 2), 4),   # in sync (broker 2's session has not ended yet)
          1: PartitionState(2, 5, (2, 1), 4),      # under-replicated, led by the unregistered broker 2
          2: PartitionState(-1, 7, (2,), 4)}       # offline
SNAPSHOT = {  # server.stats.replication_snapshot's shape
    "leader_count": 1, "under_replicated_partitions": 1, "isr_shrinks": 3, "isr_expands": 2,
    "not_enough_replicas": 1, "event_errors": 0, "offline_replicas": 1, "follower_lag_max_bytes": 40,
    "controller": {"active": True, "broker_id": 1, "epoch": 4, "elections": 6, "fenced_writes": 0,
                   "offline_partitions": 1},
    "replicas": [
        {"topic": TOPIC, "partition": 0, "role": "following", "fenced": False, "leader": 0, "leader_epoch": 3,
         "replicas": [0, 1, 2], "isr": [0, 1, 2], "high_watermark": 100, "log_end": 120, "lag_bytes": 40,
         "follower_lag_bytes": {}},
        {"topic": TOPIC, "partition": 1, "role": "leader", "fenced": False, "leader": 1, "leader_epoch": 5,
         "replicas": [1, 2, 0], "isr": [1, 2], "high_watermark": 80, "log_end": 90, "lag_bytes": None,
         "follower_lag_bytes": {0: None, 2: 10}}]}


def replicated_registry(topic: str = TOPIC) -> FakeZooKeeper:
    zk = FakeZooKeeper()
    zk.create("/brokers/ids/0", b"h-0:127.0.0.1:9092")
    zk.create("/brokers/ids/1", b"h-1:127.0.0.1:9093")
    zk.create("/brokers/topics/old/0", b"2")  # a 0.7 topic beside it
    zk.create("/replication/controller", ControllerInfo(1, 4).encode())
    zk.create("/replication/controller_epoch", b"4")  # not copied: the controller node has the epoch
    zk.create(topic_path(topic), ASSIGNMENT.encode())
    for partition, state in STATES.items():
        zk.create(state_path(topic, partition), state.encode())
    return zk


@pytest.fixture
def zk() -> FakeZooKeeper:
    return replicated_registry()


@pytest.fixture
def cache(zk) -> ClusterCache:
    cache = ClusterCache.over(zk, zk_connect="zk")
    cache.start()
    return cache


def test_the_cache_reads_the_controller_assignments_and_states(cache):
    assert cache.controller() == ControllerInfo(1, 4)
    assert cache.replicated_topics() == [TOPIC]
    entry = cache.replicated_topic(TOPIC)
    assert entry.assignment == ASSIGNMENT and entry.states == STATES and entry.replication_factor == 3
    assert cache.replicated_topic("old") is None
    assert cache.all_topics() == sorted(["old", TOPIC])
    assert "/replication/controller_epoch" not in cache.mirror.data


def test_assignment_and_state_changes_arrive_through_watches(zk, cache):
    zk.set(topic_path(TOPIC), TopicAssignment({**ASSIGNMENT.replicas, 3: (0, 1)}).encode())
    zk.create(state_path(TOPIC, 3), PartitionState(0, 0, (0, 1), 4).encode())
    zk.set(state_path(TOPIC, 1), PartitionState(1, 6, (1,), 4).encode())
    zk.delete("/replication/controller")
    entry = cache.replicated_topic(TOPIC)
    assert entry.replication_factor == 3 and entry.states[3] == PartitionState(0, 0, (0, 1), 4)
    assert entry.states[1].leader == 1
    assert cache.controller() is None
    zk.delete(topic_path(TOPIC))
    assert cache.replicated_topics() == [] and cache.replicated_topic(TOPIC) is None
    assert not any(path.startswith(topic_path(TOPIC)) for path in [*cache.mirror.data, *cache.mirror.children])


def test_unreadable_values_are_reported_not_dropped(zk, cache):
    zk.set(state_path(TOPIC, 0), b"not json")
    zk.create(topic_path("broken"), b'{"version":1,"partitions":{"1":[0]}}')  # not numbered from 0
    assert cache.replicated_topic(TOPIC).states[0] is None
    broken = cache.replicated_topic("broken")
    assert broken.assignment is None and "0..N-1" in broken.error
    page = replicated_topic_page(broken, brokers=cache.brokers(), figures={}, groups=[])
    assert page["partitions"] == [] and page["error"]


def test_the_summary_counts_under_replicated_and_offline_partitions_and_names_the_controller(cache):
    summary = replication_summary(cache)
    assert summary["controller"] == {"id": 1, "epoch": 4, "registered": True}
    assert (summary["partitions"], summary["under_replicated_partitions"], summary["offline_partitions"]) == (3, 1, 1)
    assert summary["topics"][TOPIC]["replication_factor"] == 3
    overview = overview_page(cache, LagHistory())
    assert overview["totals"]["topics"] == 2 and overview["totals"]["partitions"] == 2 + 3
    assert overview["totals"]["replicated_topics"] == 1 and overview["controller"]["id"] == 1
    rows = {row["name"]: row for row in overview["topics"]["items"]}
    assert rows["old"]["replication_factor"] is None
    assert (rows[TOPIC]["under_replicated"], rows[TOPIC]["offline"], rows[TOPIC]["brokers"]) == (1, 1, [0, 1, 2])


def test_the_topic_page_marks_each_partition(cache):
    page = replicated_topic_page(cache.replicated_topic(TOPIC), brokers=cache.brokers(),
                                 figures={0: {"earliest": 10, "latest": 70, "bytes_per_second": 2.0}}, groups=["g"])
    p0, p1, p2 = page["partitions"]
    assert (p0["leader"], p0["isr"], p0["under_replicated"], p0["offline"]) == (0, [0, 1, 2], False, False)
    assert p0["size"] == 60
    assert p0["down"] == [2] and p0["out_of_sync"] == []
    assert p1["under_replicated"] and p1["out_of_sync"] == [0] and not p1["leader_registered"]
    assert p1["preferred_leader"] == 1 and p1["size"] is None
    assert p2["offline"] and p2["leader"] is None and not p2["under_replicated"] and p2["leader_epoch"] == 7
    assert page["totals"] == {"partitions": 3, "under_replicated": 1, "offline": 1, "size": None}
    html = render("replicated_topic.html", page)
    assert 'data-mark="under-replicated"' in html and 'data-mark="offline"' in html and "broker down" in html


def test_replicated_pages_render_hostile_names_inert(cache):
    assert_inert(render("replicated_topic.html", replicated_topic_page(
        cache.replicated_topic(TOPIC), brokers=cache.brokers(), figures={}, groups=[TOPIC])))
    assert_inert(render("overview.html", overview_page(cache, LagHistory())))
    assert_inert(render("broker.html", broker_page(1, cache.brokers()[1], topics={}, snapshot=None,
                                                   replication=SNAPSHOT)))


def test_metrics_give_the_clusters_replication_and_the_embedded_brokers(cache):
    clients = BrokerClients(None, lambda broker_id: None)
    stats = BrokerStats(RequestStats(10, Clock().seconds))
    model = ConsoleModel(cache, clients, OffsetBook(clients, None), LagHistory(),
                         local_broker=LocalBroker(1, lambda: broker_snapshot(stats, FakeLogs()), lambda: SNAPSHOT))
    collector = ConsoleMetrics(model)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(collector.render().decode()) for s in family.samples}
    cluster = {name.removeprefix("twisted_broker_cluster_"): value for (name, labels), value in samples.items()
               if name.startswith("twisted_broker_cluster_")}
    assert (cluster["under_replicated_partitions"], cluster["offline_partitions"], cluster["controller"]) == (1, 1, 1)
    assert cluster["replicated_topics"] == 1
    broker = (("broker", "1"),)
    assert samples[("twisted_broker_under_replicated_partitions", broker)] == 1
    assert samples[("twisted_broker_offline_partitions", broker)] == 1
    assert samples[("twisted_broker_leader_count", broker)] == 1
    assert samples[("twisted_broker_isr_shrinks_total", broker)] == 3
    assert samples[("twisted_broker_isr_expands_total", broker)] == 2
    assert samples[("twisted_broker_not_enough_replicas_total", broker)] == 1
    assert samples[("twisted_broker_offline_replicas", broker)] == 1
    assert samples[("twisted_broker_controller", broker)] == 1
    assert samples[("twisted_broker_controller_epoch", broker)] == 4
    key = (("broker", "1"), ("partition", "0"), ("topic", TOPIC))
    assert samples[("twisted_broker_follower_lag_bytes", (*key[:1], ("leader", "0"), *key[1:]))] == 40
    lags = {labels: value for (name, labels), value in samples.items() if name == "twisted_broker_replica_lag_bytes"}
    assert lags == {(("broker", "1"), ("follower", "2"), ("partition", "1"), ("topic", TOPIC)): 10}


def test_a_node_with_a_value_and_children_keeps_one_watch_of_each_over_reconnections(zk, cache):
    for _ in range(3):
        zk.drop_connection()
        zk.reconnect()
        zk.set(topic_path(TOPIC), TopicAssignment({0: (0, 1), 1: (1, 0), 2: (0, 1)}).encode())
    assert len(zk.data_watches[topic_path(TOPIC)]) == 1
    assert len(zk.child_watches[topic_path(TOPIC)]) == 1
    assert cache.replicated_topic(TOPIC).replication_factor == 2


def test_the_summary_gives_each_broker_its_replicas_leaderships_and_under_replicated_leaderships(cache):
    # Partition 0 led by 0 in sync, 1 led by 2 (unregistered) under-replicated, 2 offline.
    assert replication_summary(cache)["brokers"] == {
        0: {"topics": 1, "replicas": 3, "leaderships": 1, "under_replicated": 0},
        1: {"topics": 1, "replicas": 3, "leaderships": 0, "under_replicated": 0},
        2: {"topics": 1, "replicas": 3, "leaderships": 1, "under_replicated": 1}}
    rows = overview_page(cache, LagHistory())["brokers"]
    assert [(r["id"], r["registered"], r["topics"], r["leaderships"], r["under_replicated"]) for r in rows] == [
        (0, True, 1 + 1, 1, 0), (1, True, 1, 0, 0), (2, False, 1, 1, 1)]  # 0 registered "old" too
    html = render("overview.html", overview_page(cache, LagHistory()))
    assert '<tr data-broker="2">' in html and "not registered" in html


def test_an_entry_is_decoded_again_only_when_its_own_nodes_change(zk, cache):
    zk.create(topic_path("other"), TopicAssignment({0: (0, 1)}).encode())
    zk.create(state_path("other", 0), PartitionState(0, 0, (0, 1), 4).encode())
    entry, other = cache.replicated_topic(TOPIC), cache.replicated_topic("other")
    zk.set(state_path("other", 0), PartitionState(0, 1, (0,), 4).encode())
    assert cache.replicated_topic(TOPIC) is entry  # the other topic's change left it as it was
    changed = cache.replicated_topic("other")
    assert changed is not other and changed.counts.under_replicated == 1
    assert replication_summary(cache)["brokers"][0]["under_replicated"] == 1
    zk.delete(topic_path("other"))
    assert cache.replicated_topic("other") is None and "other" not in replication_summary(cache)["topics"]


def test_a_brokers_page_sums_the_replicated_topics_it_holds(cache):
    rows = broker_replicated_topics(cache, 2)
    assert rows == [{"name": TOPIC, "partitions": 3, "replicas": 3, "leaderships": 1, "under_replicated": 1}]
    page = broker_page(2, None, topics={}, snapshot=None, replicated=rows)
    assert page["held"] == {"topics": 1, "replicas": 3, "leaderships": 1, "under_replicated": 1}
    html = render("broker.html", page)
    assert 'id="broker-replicated-topics"' in html and "3 replicas of 1 topics" in html
