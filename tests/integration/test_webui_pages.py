"""What the admin console's pages and their JSON twins show of a real cluster (webui_cluster.py),
over HTTP: the overview, topics and the message browser, groups, brokers, the Prometheus metrics,
registry changes seen through watches, consoles embedded in brokers (one without ZooKeeper), and,
last, a broker going away. What the console refuses is in test_webui_security.py.
"""

from __future__ import annotations

import time

from tests.support.console_process import http, metric_families, wait_for_port_file
from tests.support.polling import wait_for
from tests.support.webui_cluster import (  # noqa: F401 (a fixture: the module's cluster)
    HOSTILE_GROUP, HOSTILE_TOPIC, SCRIPT_PAYLOAD, cluster, produce,
)
from twisted_broker.codec.kafka07.message_set import encode_message_set


# -- topics and messages ----------------------------------------------------------------------------

def test_overview_lists_brokers_topics_groups_and_totals(cluster):
    overview = cluster.readonly.api("/api/overview")
    assert overview["synced"] is True
    brokers = {b["id"]: b for b in overview["brokers"]}
    assert set(brokers) == {0, 1}
    for broker in cluster.brokers:
        entry = brokers[broker.broker_id]
        assert entry["address"] == f"127.0.0.1:{broker.port}"
        assert abs(entry["registered_ms"] / 1000 - time.time()) < 600
    assert {t["name"] for t in overview["topics"]["items"]} == {"orders", "mixed", HOSTILE_TOPIC}
    orders = next(t for t in overview["topics"]["items"] if t["name"] == "orders")
    assert orders == {"name": "orders", "brokers": [0, 1], "partitions": 3, "replication_factor": None,
                      "under_replicated": 0, "offline": 0}  # a 0.7 topic: no replication
    assert {g["name"] for g in overview["groups"]} == {"live", "stopped", "filters", HOSTILE_GROUP}
    assert overview["totals"] == {"brokers": 2, "topics": 3, "partitions": 3 + 2 + 1, "groups": 4, "consumers": 3,
                                  "replicated_topics": 0, "under_replicated_partitions": 0, "offline_partitions": 0}
    assert [t["name"] for t in cluster.readonly.api("/api/overview?q=ORD")["topics"]["items"]] == ["orders"]


def test_topic_page_gives_every_broker_partition_its_offsets_and_size(cluster):
    topic = cluster.readonly.api("/api/topics/orders")
    rows = {p["name"]: p for p in topic["partitions"]}
    assert set(rows) == set(cluster.latest)
    for name, end in cluster.latest.items():
        assert rows[name]["earliest"] == 0 and rows[name]["latest"] == end and rows[name]["size"] == end
        assert rows[name]["segments"] is None and rows[name]["source"] == "wire"  # not in the wire protocol
    assert set(topic["groups"]) == {"live", "stopped", HOSTILE_GROUP}
    # The console embedded in broker 0 knows that broker's own figures.
    embedded = {p["name"]: p for p in http(cluster.embedded_port, "GET", "/api/topics/orders").json()["partitions"]}
    assert embedded["0-0"]["segments"] == 1 and embedded["0-0"]["source"] == "broker"
    assert embedded["0-0"]["size"] == cluster.latest["0-0"]
    assert embedded["1-0"]["source"] == "wire"


def test_rates_appear_once_the_console_has_seen_the_partition_twice(cluster):
    def rates(port: int) -> dict:
        time.sleep(0.3)
        return http(port, "GET", "/api/topics/mixed").json()["partitions"][0]

    wait_for(lambda: rates(cluster.readonly.port)["bytes_per_second"] is not None, "a byte rate for mixed 0-0")
    assert rates(cluster.readonly.port)["messages_per_second"] is None  # only a broker counts messages


def test_the_embedded_console_shows_a_message_rate_from_its_first_view(broker_factory, tmp_path):
    """The broker counts appended messages itself, so the rate needs no earlier page view."""
    broker = broker_factory(properties={"num.partitions": "2"}, extra_args=[
        "--webui", "tcp:0:interface=127.0.0.1", "--webui-port-file", str(tmp_path / "webui-port")])
    port = wait_for_port_file(tmp_path / "webui-port", broker.process, 30)
    for partition in (0, 1):
        produce(broker, "counted", partition, encode_message_set([b"m%d" % i for i in range(50)]))
    topic = http(port, "GET", "/api/topics/counted").json()
    rates = [p["messages_per_second"] for p in topic["partitions"]]
    assert len(rates) == 2 and all(rate > 0 for rate in rates), rates
    assert topic["totals"]["messages_per_second"] == sum(rates)
    html = http(port, "GET", "/topics/counted").text
    assert "messages/s in</div>" in html and "known only for the broker" not in html


def test_message_browser_pages_from_the_end_then_older_then_newer(cluster):
    base = "/api/topics/orders/1-0/messages"
    newest = cluster.readonly.api(f"{base}?count=5")
    assert newest["mode"] == "end" and newest["end"] == cluster.latest["1-0"]
    assert [m["payload"]["text"] for m in newest["messages"]] == [f"order 1-0-{i}" for i in range(25, 30)]
    older = cluster.readonly.api(f"{base}?count=5&before={newest['older']}")
    assert [m["payload"]["text"] for m in older["messages"]] == [f"order 1-0-{i}" for i in range(20, 25)]
    assert older["newer"] == newest["start"]
    forward = cluster.readonly.api(f"{base}?count=5&offset={older['newer']}")
    assert forward["messages"] == newest["messages"]
    first = cluster.readonly.api(f"{base}?count=2&offset=0")
    assert first["older"] is None and [m["offset"] for m in first["messages"]] == [0, first["messages"][1]["offset"]]
    for message in first["messages"]:
        assert message["valid"] is True and message["magic"] == 1 and message["codec"] == "none"
        assert message["size"] == message["next_offset"] - message["offset"] - 4


def test_wrappers_are_expanded_and_payloads_shown_as_escaped_text_or_hex(cluster):
    data = cluster.readonly.api("/api/topics/mixed/0-0/messages?offset=0")
    entries = data["messages"]
    assert [e["codec"] for e in entries] == ["none", "none", "none", "gzip", "snappy"]
    assert [i["payload"]["text"] for i in entries[3]["inner"]] == ["gzipped 1", "gzipped 2", "gzipped 3"]
    assert [i["payload"]["text"] for i in entries[4]["inner"]] == ["snappy 1", "snappy 2"]
    assert all(i["offset"] == entries[3]["offset"] for i in entries[3]["inner"])
    assert entries[2]["payload"]["format"] == "hex"
    assert entries[1]["payload"]["text"] == SCRIPT_PAYLOAD.decode()
    html = cluster.readonly.get("/topics/mixed/0-0/messages?offset=0").text
    assert "<script>window" not in html
    assert "&lt;script&gt;window.__pwned = 1; alert(&#39;payload&#39;)&lt;/script&gt;" in html
    assert "00000000  00010203 04050607" in html
    hexed = cluster.readonly.api("/api/topics/mixed/0-0/messages?offset=0&format=hex")
    assert hexed["messages"][0]["payload"]["text"] == "00000000  706c6169 6e207465 7874"


def test_message_browser_refuses_what_is_not_there(cluster):
    out_of_range = cluster.readonly.api("/api/topics/orders/0-0/messages?offset=999999")
    assert out_of_range["messages"] == [] and "outside the partition's range" in out_of_range["problem"]
    misaligned = cluster.readonly.api("/api/topics/orders/0-0/messages?offset=3")
    assert misaligned["problem"]
    for path in ["/api/topics/orders/7-0/messages", "/api/topics/orders/0-9/messages",
                 "/api/topics/orders/zero/messages", "/api/topics/nosuch/0-0/messages"]:
        response = cluster.readonly.get(path)
        assert response.status == 404 and response.json()["status"] == 404
    assert cluster.readonly.get("/api/topics/orders/0-0/messages?format=pdf").status == 400
    assert cluster.readonly.get("/api/topics/orders/0-0/messages?offset=x").status == 400


# -- groups --------------------------------------------------------------------------------------

def test_a_live_group_shows_its_consumer_owners_offsets_lag_and_a_balanced_badge(cluster):
    group = cluster.readonly.api("/api/groups/live")
    assert [c["id"] for c in group["consumers"]] == ["live_m1"]
    assert group["consumers"][0]["kind"] == "static" and group["consumers"][0]["topics"] == {"orders": 1}
    assert group["health"] == {"status": "ok", "problems": []}
    rows = {row["partition"]: row for row in group["partitions"]}
    for name, end in cluster.latest.items():
        assert rows[name]["owner"] == "live_m1-0" and rows[name]["owner_live"]
        assert rows[name]["committed"] == end and rows[name]["latest"] == end and rows[name]["lag"] == 0
    html = cluster.readonly.get("/groups/live").text
    assert 'data-health="ok"' in html and "live_m1-0" in html


def test_a_stopped_group_shows_its_lag_and_its_history(cluster):
    group = cluster.readonly.api("/api/groups/stopped")
    assert group["health"]["status"] == "stopped" and group["consumers"] == []
    assert group["lag"] == {"total": sum(cluster.latest.values()), "complete": True}
    wait_for(lambda: len(cluster.readonly.api("/api/groups/stopped")["history"]) >= 2, "two lag samples")
    history = cluster.readonly.api("/api/groups/stopped")["history"]
    assert all(total == sum(cluster.latest.values()) for _time, total in history)
    assert "<polyline" in cluster.readonly.get("/groups/stopped").text
    listed = {g["name"]: g for g in cluster.readonly.api("/api/groups")["groups"]["items"]}
    assert listed["stopped"]["lag"] == sum(cluster.latest.values()) and listed["stopped"]["health"] == "stopped"
    assert listed["live"]["health"] == "ok"


def test_filter_subscriptions_are_expanded_and_their_unowned_partitions_flagged(cluster):
    group = cluster.readonly.api("/api/groups/filters")
    consumers = {c["id"]: c for c in group["consumers"]}
    assert consumers["filters_w"]["kind"] == "whitelist" and consumers["filters_w"]["pattern"] == "ord.*"
    assert consumers["filters_w"]["topics"] == {"orders": 1}
    assert consumers["filters_b"]["kind"] == "blacklist"
    assert consumers["filters_b"]["topics"] == {HOSTILE_TOPIC: 1}
    assert group["health"]["status"] == "unbalanced"
    assert "orders 0-0 has no owner" in group["health"]["problems"]


# -- brokers, metrics, watches --------------------------------------------------------------------

def test_broker_pages_show_the_0_7_statistics_only_where_the_console_runs_inside_the_broker(cluster):
    standalone = cluster.readonly.api("/api/brokers/0")
    assert standalone["registered"] and standalone["has_stats"] is False and standalone["stats"] is None
    assert {t["name"] for t in standalone["topics"]} == {"orders", "mixed"}
    embedded = http(cluster.embedded_port, "GET", "/api/brokers/0").json()
    assert embedded["has_stats"] and embedded["embedded_in"] == 0
    stats = embedded["stats"]
    assert stats["socket_server"]["requests"]["produce"]["count"] >= 3  # orders 0-0, 0-1, mixed 0-0
    assert stats["all_topics"]["messages_in"] >= 60 + 5
    assert {(log["topic"], log["partition"]) for log in embedded["logs"]["items"]} >= {("orders", 0), ("mixed", 0)}
    assert cluster.readonly.get("/api/brokers/42").status == 404
    assert cluster.readonly.get("/brokers/abc").status == 404


def test_metrics_parse_and_carry_the_cluster_the_groups_and_the_broker(cluster):
    wait_for(lambda: "twisted_broker_group_lag_bytes" in metric_families(cluster.readonly.port)
             and metric_families(cluster.readonly.port)["twisted_broker_group_lag_bytes"].samples, "a lag sample")
    families = metric_families(cluster.readonly.port)
    assert families["twisted_broker_cluster_brokers"].samples[0].value == 2
    assert families["twisted_broker_cluster_groups"].samples[0].value == 4
    lag = {(s.labels["group"], s.labels["topic"]): s.value for s in families["twisted_broker_group_lag_bytes"].samples}
    assert lag[("stopped", "orders")] == sum(cluster.latest.values())
    ok = {s.labels["group"]: s.value for s in families["twisted_broker_group_rebalance_ok"].samples}
    assert ok["live"] == 1 and ok["filters"] == 0 and "stopped" not in ok
    assert "twisted_broker_broker_requests" not in families  # no broker inside a standalone console
    embedded = metric_families(cluster.embedded_port)
    requests = {s.labels["request"]: s.value for s in embedded["twisted_broker_broker_requests"].samples}
    assert requests["produce"] >= 3
    sizes = {(s.labels["topic"], s.labels["partition"]): s.value
             for s in embedded["twisted_broker_broker_log_size_bytes"].samples}
    assert sizes[("orders", "0")] == cluster.latest["0-0"]


def test_registry_changes_reach_the_pages_through_watches(cluster):
    cluster.kazoo.create("/consumers/late/offsets/orders/0-0", b"7", makepath=True)
    wait_for(lambda: cluster.readonly.get("/api/groups/late").status == 200, "the new group")
    cluster.kazoo.set("/consumers/late/offsets/orders/0-0", b"9")
    # The group shows as soon as its node is seen, possibly before its partitions: wait for both.
    wait_for(lambda: any(p["partition"] == "0-0" and p["committed"] == 9
                         for p in cluster.readonly.api("/api/groups/late")["partitions"]), "the new offset")
    cluster.kazoo.delete("/consumers/late", recursive=True)
    wait_for(lambda: cluster.readonly.get("/api/groups/late").status == 404, "the group to go")
    produce(cluster.brokers[1], "fresh", 0, encode_message_set([b"x"]))
    wait_for(lambda: cluster.readonly.get("/api/topics/fresh").status == 200, "the new topic")
    families = metric_families(cluster.readonly.port)
    assert families["twisted_broker_console_zookeeper_watch_events"].samples[0].value >= 4


# -- the console embedded in a broker without ZooKeeper -----------------------------------------------

def test_a_broker_without_zookeeper_embeds_a_console_of_itself(broker_factory, tmp_path):
    broker = broker_factory("alone", extra_args=["--webui", "tcp:0:interface=127.0.0.1",
                                                 "--webui-port-file", str(tmp_path / "webui-port")])
    port = wait_for_port_file(tmp_path / "webui-port", broker.process, 30)
    produce(broker, "solo", 0, encode_message_set([b"one", b"two"]))
    overview = http(port, "GET", "/api/overview").json()
    assert overview["has_registry"] is False
    assert [b["address"] for b in overview["brokers"]] == [f"127.0.0.1:{broker.port}"]
    wait_for(lambda: http(port, "GET", "/api/topics/solo").status == 200, "the topic")

    def payloads() -> list[str]:
        return [m["payload"]["text"] for m in http(port, "GET", "/api/topics/solo/0-0/messages").json()["messages"]]
    wait_for(lambda: payloads() == ["one", "two"], "the messages (the broker flushes on a thread)")
    assert http(port, "GET", "/api/brokers/0").json()["has_stats"] is True
    assert http(port, "GET", "/").status == 200 and http(port, "GET", "/groups").status == 200


# -- last, as it changes the module's cluster: a broker goes away -------------------------------------

def test_a_broker_that_goes_away_reads_as_unknown_not_as_an_error(cluster):
    cluster.brokers[1].kill()  # its registration stays until its session times out (2 s)

    def refused() -> bool:
        row = {p["name"]: p for p in cluster.readonly.api("/api/topics/orders")["partitions"]}["1-0"]
        return row["latest"] is None and row["error"] and "broker 1" in row["error"]
    wait_for(refused, "the console to find broker 1 down")
    assert cluster.readonly.get("/topics/orders").status == 200
    wait_for(lambda: [b["id"] for b in cluster.readonly.api("/api/overview")["brokers"]] == [0],
             "broker 1's registration to vanish", timeout_s=15)
    # Its topic registrations went with it (the console reads the two nodes' watches one after
    # the other: a fresh-clone CI run once caught the topic page between them).
    wait_for(lambda: "1-0" not in {p["name"] for p in cluster.readonly.api("/api/topics/orders")["partitions"]},
             "broker 1's topic registration to vanish", timeout_s=15)
    group = cluster.readonly.api("/api/groups/stopped")
    rows = {p["partition"]: p for p in group["partitions"]}
    assert rows["1-0"]["registered"] is False and rows["1-0"]["latest"] is None and rows["1-0"]["lag"] is None
    assert group["lag"]["complete"] is False
    assert "(not registered)" in cluster.readonly.get("/groups/stopped").text
