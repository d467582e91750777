"""Templates render hostile registry data and payloads inert; /metrics parses as Prometheus text."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.webui.test_zk_mirror import FakeZooKeeper
from twisted_broker.server.stats import BrokerStats, RequestStats, broker_snapshot
from webui.app import template_environment
from webui.broker_offsets import BrokerClients, OffsetBook
from webui.cluster_cache import ClusterCache
from webui.lag_history import LagHistory, LagSample
from webui.message_browser import BrowsedMessage, BrowseResult
from webui.metrics import ConsoleMetrics
from webui.model import ConsoleModel, LocalBroker
from webui.views import broker_page, group_page, groups_page, messages_page, overview_page, topic_page

TOPIC = '"><script>alert(1)'  # legal: 0.7 forbids only "/", controls and a few ranges in topic names
GROUP = 'g"><img src=x onerror=alert(1)>'
CONSUMER = f"{GROUP}_host-1-abcd1234"
HOSTILE = ("<script>", "<img src=x", 'onerror=alert(1)>"')


@dataclass
class FakeLog:
    topic: str
    partition: int
    size: int = 120
    segments: list = (1,)
    first_offset: int = 0
    end_offset: int = 120
    messages_appended: int = 8
    flush_count: int = 2
    flush_seconds_total: float = 0.002
    flush_seconds_max: float = 0.0015


class FakeLogs:
    def logs(self):
        return [FakeLog(TOPIC, 0)]


class Clock:
    def seconds(self) -> float:
        return 5000.0


@pytest.fixture
def cluster() -> ClusterCache:
    zk = FakeZooKeeper()
    zk.create("/brokers/ids/0", b"h-1:127.0.0.1:9092")
    zk.create(f"/brokers/topics/{TOPIC}/0", b"1")
    # 0.7 writes the registration JSON without escaping: a quote in a topic name breaks it.
    zk.create(f"/consumers/{GROUP}/ids/{CONSUMER}", b'{ "<script>": 1 }')
    zk.create(f"/consumers/{GROUP}/owners/{TOPIC}/0-0", b'<script>alert("owner")</script>')
    zk.create(f"/consumers/{GROUP}/offsets/{TOPIC}/0-0", b"40")
    cache = ClusterCache.over(zk, zk_connect="127.0.0.1:2181/<chroot>")
    cache.start()
    return cache


def render(name: str, page: dict) -> str:
    return template_environment().get_template(name).render(page=page, title=TOPIC, refresh_s=5,
                                                             admin_actions=False, now_ms=0)


def assert_inert(html: str) -> None:
    for fragment in HOSTILE:
        assert fragment not in html
    assert "&lt;script&gt;" in html


def test_every_page_escapes_what_users_and_clients_wrote(cluster):
    history = LagHistory()
    history.add(GROUP, LagSample(4990.0, 80, {TOPIC: 80}))
    assert_inert(render("overview.html", overview_page(cluster, history)))
    assert_inert(render("groups.html", groups_page(cluster, history)))
    state = cluster.group(GROUP)
    group = group_page(state, topics=cluster.topics(), topic_brokers=cluster.topic_brokers,
                       latest={(TOPIC, "0-0"): 120}, samples=history.samples(GROUP), now_s=5000.0)
    group["admin"] = {"csrf_field": "csrf_token", "csrf_token": "t", "topics": group["topics"], "stopped": True}
    html = render("group.html", group)
    assert_inert(html)
    assert '<polyline class="line"' in html
    assert_inert(render("topic.html", topic_page(TOPIC, counts={0: 1}, brokers=cluster.brokers(), figures={},
                                                 groups=[GROUP])))
    snapshot = broker_snapshot(BrokerStats(RequestStats(10, Clock().seconds)), FakeLogs())
    assert_inert(render("broker.html", broker_page(0, cluster.brokers()[0], topics={TOPIC: 1}, snapshot=snapshot)))


def test_a_script_payload_is_shown_as_text(cluster):
    messages = [BrowsedMessage(0, 40, 36, 1, "none", 1, True, b"<script>alert('payload')</script>"),
                BrowsedMessage(40, 60, 16, 1, "none", 2, False, b"\x00<img src=x>\xff")]
    html = render("messages.html", messages_page(TOPIC, 0, 0, BrowseResult(0, 60, messages), earliest=0,
                                                 latest=60, mode="end", fmt="auto", count=20))
    assert_inert(html)
    assert "&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;" in html
    assert "00000000  003c696d 67207372" in html  # the binary payload in hex


def test_links_quote_names_for_urls(cluster):
    html = render("overview.html", overview_page(cluster, LagHistory()))
    assert 'href="/topics/%22%3E%3Cscript%3Ealert%281%29"' in html
    assert 'href="/groups/g%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E"' in html


def test_metrics_parse_as_prometheus_text(cluster):
    snapshot_stats = BrokerStats(RequestStats(10, Clock().seconds))
    snapshot_stats.topic(TOPIC).messages_in = 8
    clients = BrokerClients(None, lambda broker_id: None)
    model = ConsoleModel(cluster, clients, OffsetBook(clients, Clock()), LagHistory(),
                         local_broker=LocalBroker(0, lambda: broker_snapshot(snapshot_stats, FakeLogs())))
    model.history.add(GROUP, LagSample(4990.0, 80, {TOPIC: 80}))
    metrics = ConsoleMetrics(model)
    metrics.page_seconds.labels("overview").observe(0.01)
    families = {family.name: family for family in text_string_to_metric_families(metrics.render().decode())}
    lag = families["twisted_broker_group_lag_bytes"].samples
    assert [(s.labels, s.value) for s in lag] == [({"group": GROUP, "topic": TOPIC}, 80.0)]
    assert families["twisted_broker_cluster_topics"].samples[0].value == 1
    # The owner node holds no live thread id (and the consumer subscribes to another topic).
    assert families["twisted_broker_group_rebalance_ok"].samples[0].value == 0
    messages_in = {s.labels["topic"]: s.value for s in families["twisted_broker_broker_topic_messages_in"].samples}
    assert messages_in == {"": 0.0, TOPIC: 8.0}
    assert families["twisted_broker_broker_log_segments"].samples[0].labels == {
        "broker": "0", "topic": TOPIC, "partition": "0"}
    assert families["twisted_broker_console_page_seconds"].type == "histogram"
