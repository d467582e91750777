"""The pure view models: pagination, payload display, rebalance health, lag, chart."""

from __future__ import annotations

import pytest

from twisted_broker.registry import paths
from webui.cluster_cache import ConsumerEntry, GroupState
from webui.lag_history import LagSample
from webui.message_browser import BrowsedMessage, BrowseResult
from webui.views import (
    group_page, human_bytes, lag_chart, messages_page, paginate, payload_view, rebalance_health, topic_page,
)

TOPICS = ["audit", "internal-x", "orders"]
BROKERS = {"orders": {0: 2, 1: 1}, "audit": {0: 1}, "internal-x": {1: 1}}


def topic_brokers(topic: str) -> dict[int, int]:
    return BROKERS.get(topic, {})


def consumer(consumer_id: str, value: bytes) -> ConsumerEntry:
    return ConsumerEntry(consumer_id, value.decode(), paths.decode_subscription(value), 1000)


@pytest.mark.parametrize("page, expected", [(1, [0, 1, 2]), (2, [3, 4, 5]), (4, [9]), (99, [9]), (0, [0, 1, 2])])
def test_paginate_clamps_the_page(page, expected):
    result = paginate(list(range(10)), page, per_page=3)
    assert result["items"] == expected
    assert result["pages"] == 4 and result["total"] == 10


def test_payload_view_shows_printable_utf8_as_text_and_the_rest_as_hex():
    assert payload_view("héllo <b>".encode())["text"] == "héllo <b>"
    binary = payload_view(bytes(range(20)))
    assert binary["format"] == "hex"
    assert binary["text"].splitlines()[0] == "00000000  00010203 04050607 08090a0b 0c0d0e0f"
    assert payload_view(b"a\x00b")["format"] == "hex"  # a control character: not shown as text
    assert payload_view(b"a\x00b", "text")["text"] == "a\x00b"
    assert payload_view(b"\xff\xfe", "text")["text"] == "\\xff\\xfe"
    assert payload_view(b"plain", "hex")["format"] == "hex"


def test_payload_view_cuts_long_payloads_even_inside_a_character():
    view = payload_view("é".encode() * 10, limit=5)  # the cut falls in the third é
    assert view == {**view, "format": "text", "text": "éé", "bytes": 20, "shown": 5, "truncated": True}


def test_a_group_whose_every_partition_has_a_live_owner_is_balanced():
    state = GroupState("g", consumers={"g_a": consumer("g_a", b'{ "orders": 2 }')},
                       owners={"orders": {"0-0": "g_a-0", "0-1": "g_a-0", "1-0": "g_a-1"}})
    assert rebalance_health(state, TOPICS, topic_brokers) == {"status": "ok", "problems": []}


def test_rebalance_health_names_unowned_and_dead_owned_partitions():
    state = GroupState("g", consumers={"g_a": consumer("g_a", b'{ "orders": 1 }')},
                       owners={"orders": {"0-0": "g_a-0", "0-1": "g_gone-0"}, "audit": {"0-0": "g_a-0"}})
    health = rebalance_health(state, TOPICS, topic_brokers)
    assert health["status"] == "unbalanced"
    assert health["problems"] == [
        "orders 0-1 is owned by g_gone-0, which is not a live consumer thread of orders",
        "orders 1-0 has no owner",
        "audit 0-0 is owned by g_a-0, but no live consumer subscribes to audit"]


def test_a_group_without_consumers_or_owners_is_stopped():
    state = GroupState("g", offsets={"orders": {"0-0": 5}})
    assert rebalance_health(state, TOPICS, topic_brokers)["status"] == "stopped"


def test_filters_expand_over_the_registered_topics():
    state = GroupState("g", consumers={"g_w": consumer("g_w", b"*1*orders|audit"),
                                       "g_b": consumer("g_b", b"!1!internal-.*")})
    page = group_page(state, topics=TOPICS, topic_brokers=topic_brokers, latest={}, samples=[], now_s=0)
    rows = {row["id"]: row for row in page["consumers"]}
    assert rows["g_w"]["kind"] == "whitelist" and rows["g_w"]["topics"] == {"orders": 1, "audit": 1}
    assert rows["g_b"]["kind"] == "blacklist" and rows["g_b"]["topics"] == {"audit": 1, "orders": 1}
    assert rows["g_b"]["pattern"] == "internal-.*"
    # Both consume orders and audit: 4 partitions, 2 threads each; none owned yet.
    assert page["health"]["status"] == "unbalanced"
    assert {(row["topic"], row["partition"]) for row in page["partitions"]} == {
        ("audit", "0-0"), ("orders", "0-0"), ("orders", "0-1"), ("orders", "1-0")}


def test_group_page_computes_lag_in_bytes_per_partition():
    state = GroupState("g", consumers={"g_a": consumer("g_a", b'{ "orders": 1 }')},
                       owners={"orders": {"0-0": "g_a-0", "0-1": "g_a-0", "1-0": "g_a-0"}},
                       offsets={"orders": {"0-0": 100, "1-0": 40}})
    latest = {("orders", "0-0"): 150, ("orders", "0-1"): 0, ("orders", "1-0"): None}
    page = group_page(state, topics=TOPICS, topic_brokers=topic_brokers, latest=latest, samples=[], now_s=0)
    rows = {row["partition"]: row for row in page["partitions"]}
    assert rows["0-0"] == {**rows["0-0"], "committed": 100, "latest": 150, "lag": 50, "owner_live": True,
                           "assigned": "g_a-0"}
    assert rows["0-1"]["lag"] is None  # nothing committed yet
    assert rows["1-0"]["lag"] is None  # the broker did not answer
    assert page["lag"] == {"total": 50, "complete": False}


def test_lag_chart_places_samples_on_the_last_hour():
    samples = [LagSample(1000.0 - 3600, 5000), LagSample(1000.0 - 1800, 2500), LagSample(1000.0, 0)]
    chart = lag_chart(samples, now_s=1000.0, width=640, height=200)
    assert chart["points"] == "70.0,10.0 350.0,90.0 630.0,170.0"  # plot: x 70..630, y 170..10
    assert chart["y_ticks"][-1]["label"] == human_bytes(5000)
    assert lag_chart([LagSample(1000.0, 4000)], now_s=1000.0)["y_ticks"][-1]["label"] == human_bytes(5000)
    assert chart["samples"] == 3 and chart["last"] == 0
    assert lag_chart([LagSample(0.0, 5)], now_s=99999.0)["samples"] == 0  # older than an hour


def test_topic_page_sums_sizes_only_when_all_are_known():
    figures = {(0, 0): {"earliest": 0, "latest": 100, "size": 100},
               (0, 1): {"earliest": 0, "latest": 50, "size": 50}, (1, 0): {}}
    page = topic_page("orders", counts={0: 2, 1: 1}, brokers={}, figures=figures, groups=["g"])
    assert [p["name"] for p in page["partitions"]] == ["0-0", "0-1", "1-0"]
    assert page["totals"]["size"] is None
    assert page["partitions"][2]["broker_registered"] is False


def test_messages_page_links_to_older_and_newer_pages():
    message = BrowsedMessage(20, 35, 11, 1, "none", 0, True, b"hello")
    page = messages_page("t", 0, 0, BrowseResult(20, 35, [message]), earliest=0, latest=100, mode="offset",
                         fmt="auto", count=1)
    assert (page["older"], page["newer"]) == (20, 35)
    assert page["messages"][0]["crc"] == "0x00000000"
    at_ends = messages_page("t", 0, 0, BrowseResult(0, 100, [message]), earliest=0, latest=100, mode="end",
                            fmt="auto", count=1)
    assert (at_ends["older"], at_ends["newer"]) == (None, None)


def _kafka_group_page(members):
    state = GroupState("kg", offsets={"orders": {"0-0": 10, "0-1": 30, "1-0": 5}}, registered=False)
    latest = {("orders", "0-0"): 12, ("orders", "0-1"): 30, ("orders", "1-0"): None}
    modern = {"orders": ["0-0", "0-1", "1-0"]}  # modern partitions 0, 1, 2
    return group_page(state, topics=TOPICS, topic_brokers=topic_brokers, latest=latest, samples=[], now_s=0,
                      partition_names=modern.__getitem__, members=members)


def test_a_kafka_clients_group_takes_owners_and_health_from_its_coordinator():
    from twisted_broker.client.modern_lookup import GroupMember, GroupMembers

    members = GroupMembers("Stable", (GroupMember("m-1", "py", "/127.0.0.1", {"orders": [0, 2]}),
                                      GroupMember("m-2", "py", "/127.0.0.1", {"orders": [1]})))
    page = _kafka_group_page(members)
    assert (page["kind"], page["lag_unit"], page["health"]["status"]) == ("kafka", "offsets", "ok")
    rows = {row["partition"]: (row["owner"], row["lag"]) for row in page["partitions"]}
    assert rows == {"0-0": ("m-1", 2), "0-1": ("m-2", 0), "1-0": ("m-1", None)}
    assert page["lag"] == {"total": 2, "complete": False}
    assert [m["partitions"] for m in page["members"]] == [{"orders": [0, 2]}, {"orders": [1]}]
    rebalancing = _kafka_group_page(GroupMembers("PreparingRebalance", ()))
    assert rebalancing["health"] == {"status": "unbalanced",
                                     "problems": ["the group is rebalancing (PreparingRebalance)"]}
    assert _kafka_group_page(GroupMembers("Empty"))["health"]["status"] == "stopped"
    assert _kafka_group_page(None)["health"]["status"] == "stopped"  # no coordinator answered
