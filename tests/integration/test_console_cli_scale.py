"""The console and the CLI at scale (issue 23's item 6): a registry of 1,000 replicated topics on
five brokers, written straight into a real ZooKeeper (tests/support/scale_registry.py: the
registry's real paths and values, some partitions under-replicated, some offline), read by a
standalone console over HTTP and by ``twisted-broker topics`` as a process.

What is checked is what they show: the overview's pages and filter, the broker table's
replicas, leaderships and under-replicated leaderships (a replicated cluster's brokers used to
show "0 topics"), a broker's page, a broker that holds replicas while it is not registered, and
``topics --describe`` of every topic. How fast is bench/console_scale.py's business.
"""

from __future__ import annotations

import re

import pytest
from kazoo.client import KazooClient

from tests.support.cli import assert_one_line_error, run_cli
from tests.support.console_process import ConsoleProcess
from tests.support.polling import wait_for
from tests.support.scale_registry import ScaleLayout, write_registry
from tests.support.zookeeper import new_chroot
from twisted_broker.registry import paths, replication_paths
from twisted_broker.registry.replication_paths import PartitionState

LAYOUT = ScaleLayout(topics=1000, partitions=1)


@pytest.fixture(scope="module")
def registry(zookeeper, tmp_path_factory):
    """The layout in a chroot of its own, a started kazoo client there, and its connect string."""
    zk_connect = new_chroot(zookeeper)
    client = KazooClient(hosts=zk_connect)
    client.start(30)
    write_registry(client, LAYOUT)
    yield zk_connect, client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def console(registry, tmp_path_factory):
    console = ConsoleProcess(tmp_path_factory.mktemp("console-scale"), registry[0], "--lag-sample-interval", "600")
    console.start()
    wait_for(lambda: (o := console.api("/api/overview"))["synced"] and o["totals"]["partitions"] == LAYOUT.topics,
             "the console's copy of the registry", timeout_s=60)
    yield console
    console.stop()


def names(overview: dict) -> list[str]:
    return [topic["name"] for topic in overview["topics"]["items"]]


def broker_rows(console) -> dict[int, dict]:
    return {row["id"]: row for row in console.api("/api/overview")["brokers"]}


def test_the_overview_pages_the_thousand_topics_fifty_at_a_time(console):
    first = console.api("/api/overview")
    counts = LAYOUT.counts()
    assert first["totals"]["topics"] == first["totals"]["replicated_topics"] == 1000
    assert (first["totals"]["under_replicated_partitions"], first["totals"]["offline_partitions"]) == (
        counts["under_replicated"], counts["offline"])
    assert {k: first["topics"][k] for k in ("page", "pages", "total")} == {"page": 1, "pages": 20, "total": 1000}
    assert names(first) == LAYOUT.topic_names()[:50]
    row = first["topics"]["items"][7]  # partition number 7: offline
    assert (row["replication_factor"], row["offline"], row["under_replicated"]) == (3, 1, 0)
    assert first["topics"]["items"][3]["under_replicated"] == 1
    assert names(console.api("/api/overview?page=20")) == LAYOUT.topic_names()[950:]
    assert console.api("/api/overview?page=99")["topics"]["page"] == 20  # clamped
    html = console.get("/?page=2").text
    assert 'href="/?page=1"' in html and 'href="/?page=3"' in html and "page 2 of 20 (1,000)" in html
    assert html.count('class="topic-link"') == 50 and ">scale-0050</a>" in html and ">scale-0100</a>" not in html


def test_the_filter_matches_a_substring_and_pages_its_matches(console):
    expected = [name for name in LAYOUT.topic_names() if "099" in name]
    assert len(expected) == 11  # scale-0099 and scale-0990..0999
    filtered = console.api("/api/overview?q=099")
    assert names(filtered) == expected and filtered["topics"]["pages"] == 1 and filtered["topic_query"] == "099"
    assert filtered["totals"]["topics"] == 1000  # the totals stay the cluster's
    wide = console.api("/api/overview?q=SCALE-00&page=2")  # case-insensitive: 100 matches, 2 pages
    assert (wide["topics"]["total"], wide["topics"]["pages"]) == (100, 2)
    assert names(wide) == LAYOUT.topic_names()[50:100]
    html = console.get("/?q=scale-00").text
    assert 'href="/?page=2&amp;q=scale-00"' in html and 'value="scale-00"' in html
    assert "No topic matches" in console.get("/?q=nothing-like-this").text


def test_the_broker_table_gives_each_brokers_replicas_leaderships_and_under_replicated(console):
    figures = LAYOUT.broker_figures()
    rows = {row["id"]: row for row in console.api("/api/overview")["brokers"]}
    assert set(rows) == set(range(5))
    for broker, expected in figures.items():
        row = rows[broker]
        assert {k: row[k] for k in expected} == expected, broker
        assert row["topics"] == expected["replicas"]  # one partition per topic: a topic per replica
        assert row["registered"] and row["address"] == f"127.0.0.1:{9092 + broker}"
    assert sum(f["replicas"] for f in figures.values()) == 3 * 1000
    html = console.get("/").text
    cells = re.search(r'<tr data-broker="2">(.*?)</tr>', html, re.S).group(1)
    numbers = [int(n.replace(",", "")) for n in re.findall(r'class="num[^"]*"[^>]*>([\d,]+)<', cells)]
    assert numbers == [figures[2]["replicas"], figures[2]["replicas"], figures[2]["leaderships"],
                       figures[2]["under_replicated"]]


def test_a_brokers_page_lists_the_replicated_topics_it_holds(console):
    figures = LAYOUT.broker_figures()[1]
    page = console.api("/api/brokers/1")
    assert page["held"] == {"topics": figures["replicas"], **figures}
    held = page["replicated_topics"]
    assert held["total"] == figures["replicas"] and len(held["items"]) == 50
    led = [row for row in held["items"] if row["leaderships"]]
    assert led and all(row["replicas"] == 1 and row["partitions"] == 1 for row in held["items"])
    last = console.api(f"/api/brokers/1?replicas_page={held['pages']}")["replicated_topics"]
    assert last["page"] == held["pages"] and last["items"]
    html = console.get("/brokers/1").text
    assert 'id="broker-replicated-topics"' in html and 'href="/brokers/1?replicas_page=2"' in html


def test_changes_reach_the_figures_and_an_unregistered_broker_keeps_its_row(console, registry):
    _, client = registry
    client.set(replication_paths.state_path(LAYOUT.topic(0), 0),
               PartitionState(0, 2, (0,), 3).encode())  # scale-0000: led by 0, ISR shrunk to it alone
    before = LAYOUT.broker_figures()
    wait_for(lambda: broker_rows(console)[0]["under_replicated"] == before[0]["under_replicated"] + 1,
             "the ISR change on the broker table")
    client.delete(f"{paths.BROKER_IDS}/4")
    try:
        row = wait_for(lambda: not (r := broker_rows(console)[4])["registered"] and r, "broker 4 shown unregistered")
        assert not row["registered"] and row["address"] is None and row["replicas"] == before[4]["replicas"]
        assert "not registered" in console.get("/").text
        assert console.api("/api/brokers/4")["held"]["replicas"] == before[4]["replicas"]  # not a 404
    finally:
        client.create(f"{paths.BROKER_IDS}/4", paths.BrokerInfo(4, "scale-4", "127.0.0.1", 9096).encode())
        client.set(replication_paths.state_path(LAYOUT.topic(0), 0), LAYOUT.state(0, 0).encode())


def test_topics_describe_of_every_topic_prints_every_partition(registry):
    zk_connect, _ = registry
    result = run_cli("topics", "--zk", zk_connect, "--describe")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert len(lines) == 1 + 1000 and set(rows) == set(LAYOUT.topic_names())
    for index in (0, 3, 7, 999):
        replicas, state = LAYOUT.replicas(index, 0), LAYOUT.state(index, 0)
        assert rows[LAYOUT.topic(index)] == ["0", str(state.leader) if state.online else "none",
                                             ",".join(map(str, replicas)), ",".join(map(str, state.isr))]
    listed = run_cli("topics", "--zk", zk_connect)
    assert listed.returncode == 0, listed.stderr.decode()
    listing = listed.stdout.decode().splitlines()
    assert listing[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"] and len(listing) == 1001
    assert listing[1].split() == ["scale-0000", "1", "3"]


def test_describe_reports_a_state_that_does_not_decode_as_one_line(zk, zk_connect):
    """Read in bulk, as the rest: a bad value among many is still named by its path."""
    write_registry(zk, ScaleLayout(topics=30, partitions=2))
    zk.set(replication_paths.state_path("scale-0017", 1), b"not json")
    result = run_cli("topics", "--zk", zk_connect, "--describe")
    assert_one_line_error(result, 1, "/replication/topics/scale-0017/partitions/1/state", "is not JSON")
    zk.delete(replication_paths.topic_path("scale-0029"), recursive=True)
    zk.create(replication_paths.topic_path("scale-0029"), b"[]")
    assert_one_line_error(run_cli("topics", "--zk", zk_connect), 1, "/replication/topics/scale-0029")
