"""The admin console over HTTP against a real cluster, every page and its JSON twin.

One cluster per module (starting it takes a few seconds): ZooKeeper (a chroot of its own), two
brokers, broker 0 embedding a console (``--webui``), two standalone consoles (``twistd -n
webui``: one read-only as by default, one with ``--allow-admin-actions``), and consumer groups:

- ``live``: a real ZooKeeper consumer (client/zookeeper_consumer.py, in a process of its own,
  tests/integration/consumer_group_member.py) that has consumed everything of ``orders``;
- ``stopped``, ``filters``, and a group with a hostile name: registry nodes written with kazoo
  as 0.7 consumers leave them (committed offsets of a stopped group; whitelist and blacklist
  registrations), since those states are hard to hold still with live consumers.

The consoles sample lag every 0.5 s here; every check of something that changes polls.
"""

from __future__ import annotations

from http.client import HTTPConnection
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import TWISTD, BrokerProcess, new_chroot
from tests.integration.polling import wait_for
from twisted_broker.wire.compression import GZIP, SNAPPY
from twisted_broker.wire.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.wire.requests import OffsetRequest, ProduceRequest, encode_request

HERE = Path(__file__).resolve().parent
HOSTILE_TOPIC = '"><script>alert(1)'
HOSTILE_GROUP = "g'><img src=x onerror=alert(2)>"
SCRIPT_PAYLOAD = b"<script>window.__pwned = 1; alert('payload')</script>"
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")


# -- support, also used by tests/browser -------------------------------------------------------

@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def http(port: int, method: str, path: str, *, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> Response:
    """One HTTP request to 127.0.0.1:port with exactly the headers given (Host included)."""
    connection = HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
        return Response(response.status, {k.lower(): v for k, v in response.getheaders()}, data,
                        response.headers.get_all("Set-Cookie") or [])
    finally:
        connection.close()


class ConsoleProcess:
    """``twistd -n webui`` in a child process; ``start()`` waits until it serves."""

    def __init__(self, directory: Path, zk_connect: str, *extra_args: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port_file = directory / "port"
        self.log_file = directory / "twistd.log"
        self.args = ["webui", "--zk", zk_connect, "--listen", "tcp:0:interface=127.0.0.1",
                     "--port-file", str(self.port_file), *extra_args]
        self.process: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self, timeout_s: float = 30.0) -> "ConsoleProcess":
        with (self.directory / "stderr.log").open("wb") as stderr:
            self.process = subprocess.Popen([*TWISTD, "-n", "--pidfile=", f"--logfile={self.log_file}", *self.args],
                                            cwd=self.directory, stdout=subprocess.DEVNULL, stderr=stderr)
        self.port = wait_for_port_file(self.port_file, self.process, timeout_s)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def get(self, path: str, **kwargs) -> Response:
        return http(self.port, "GET", path, **kwargs)

    def api(self, path: str):
        response = self.get(path)
        assert response.status == 200, (path, response.status, response.body[:500])
        return response.json()


def wait_for_port_file(path: Path, process: subprocess.Popen, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode} before writing {path.name}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not written within {timeout_s} s")
        time.sleep(0.05)
    return int(path.read_text())


def produce(broker: BrokerProcess, topic: str, partition: int, message_set: bytes) -> None:
    """One Produce; the Offsets request after it is answered once the produce was handled."""
    with broker.connect() as client:
        client.send(encode_request(ProduceRequest(topic, partition, message_set)))
        client.request(encode_request(OffsetRequest(topic, partition, -1, 1)))


def start_member(zk_connect: str, group: str, topic: str, consumer_id: str, out: Path, *args: str) -> subprocess.Popen:
    """A ZooKeeper consumer in its own process (consumer_group_member.py); its events go to ``out``."""
    with out.open("wb") as stdout:
        return subprocess.Popen([sys.executable, str(HERE / "consumer_group_member.py"), zk_connect, group, topic,
                                 consumer_id, *args], stdout=stdout, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def member_events(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]


def stop_process(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the cluster -----------------------------------------------------------------------------------

@dataclass
class Cluster:
    zk_connect: str
    kazoo: KazooClient
    brokers: list[BrokerProcess]
    readonly: ConsoleProcess
    admin: ConsoleProcess
    embedded_port: int
    latest: dict[str, int]  # "orders" partition name -> end offset

    def zk_offset(self, group: str, topic: str, name: str) -> int | None:
        path = f"/consumers/{group}/offsets/{topic}/{name}"
        return int(self.kazoo.get(path)[0]) if self.kazoo.exists(path) else None


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("webui")
    zk_connect = new_chroot(zookeeper)
    kazoo = KazooClient(hosts=zk_connect)
    kazoo.start(10)
    started: list = []
    member = None
    try:
        b0 = BrokerProcess(base / "b0", broker_id=0, zk_connect=zk_connect, properties={"num.partitions": "2"},
                           extra_args=["--webui", "tcp:0:interface=127.0.0.1",
                                       "--webui-port-file", str(base / "b0" / "webui-port")])
        started.append(b0.start())
        b1 = BrokerProcess(base / "b1", broker_id=1, zk_connect=zk_connect)
        started.append(b1.start())
        embedded_port = wait_for_port_file(base / "b0" / "webui-port", b0.process, 30)
        latest = {}
        for broker, partition in ((b0, 0), (b0, 1), (b1, 0)):
            messages = encode_message_set([b"order %d-%d-%d" % (broker.broker_id, partition, i) for i in range(30)])
            produce(broker, "orders", partition, messages)
            latest[f"{broker.broker_id}-{partition}"] = len(messages)
        mixed = (encode_message_set([b"plain text", SCRIPT_PAYLOAD, bytes(range(64))])
                 + encode_compressed_message_set([b"gzipped 1", b"gzipped 2", b"gzipped 3"], GZIP)
                 + encode_compressed_message_set([b"snappy 1", b"snappy 2"], SNAPPY))
        produce(b0, "mixed", 0, mixed)
        produce(b1, HOSTILE_TOPIC, 0, encode_message_set([b"hostile"]))
        # Registry nodes of groups without live consumers, as 0.7 consumers leave them.
        for name in latest:
            kazoo.create(f"/consumers/stopped/offsets/orders/{name}", b"0", makepath=True)
            kazoo.create(f"/consumers/live/offsets/orders/{name}", b"0", makepath=True)  # start from the beginning
        kazoo.create(f"/consumers/{HOSTILE_GROUP}/offsets/orders/0-0", b"5", makepath=True)
        kazoo.create("/consumers/filters/ids/filters_w", b"*1*ord.*", makepath=True, ephemeral=True)
        kazoo.create("/consumers/filters/ids/filters_b", b"!1!mix.*|orders", makepath=True, ephemeral=True)
        member_out = base / "member.out"
        member = start_member(zk_connect, "live", "orders", "m1", member_out, "--commit-every", "1")
        wait_for(lambda: any(e["event"] == "ready" for e in member_events(member_out)), "the live consumer to start",
                 timeout_s=30)
        readonly = ConsoleProcess(base / "readonly", zk_connect, "--lag-sample-interval", "0.5", "--refresh", "1")
        started.append(readonly.start())
        admin = ConsoleProcess(base / "admin", zk_connect, "--lag-sample-interval", "0.5", "--allow-admin-actions")
        started.append(admin.start())
        cluster = Cluster(zk_connect, kazoo, [b0, b1], readonly, admin, embedded_port, latest)
        wait_for(lambda: all(cluster.zk_offset("live", "orders", name) == end for name, end in latest.items()),
                 "the live consumer to commit everything", timeout_s=30)

        def visible(topic: str, name: str, end: int) -> bool:  # brokers publish flushes from a thread
            response = readonly.get(f"/api/topics/{quote(topic, safe='')}")
            return response.status == 200 and any(p["name"] == name and p["latest"] == end
                                                   for p in response.json()["partitions"])
        wait_for(lambda: visible("mixed", "0-0", len(mixed)) and visible(HOSTILE_TOPIC, "1-0", 4 + 6 + 7),
                 "every message to be flushed")
        yield cluster
    finally:
        stop_process(member)
        for process in reversed(started):
            process.stop()
        kazoo.stop()
        kazoo.close()


def assert_secure(response: Response) -> None:
    for header in SECURITY_HEADERS:
        assert header in response.headers, f"{header} missing"
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


# -- every page ---------------------------------------------------------------------------------

PAGES = [
    ("/", "/api/overview"),
    ("/?page=1&q=ord", "/api/overview?q=ord"),
    ("/topics/orders", "/api/topics/orders"),
    ("/topics/orders/1-0/messages", "/api/topics/orders/1-0/messages"),
    ("/topics/orders/0-0/messages?offset=0&count=3&format=hex", "/api/topics/orders/0-0/messages?offset=0&count=3"),
    ("/groups", "/api/groups"),
    ("/groups/live", "/api/groups/live"),
    ("/groups/stopped", "/api/groups/stopped"),
    ("/brokers/0", "/api/brokers/0"),
    ("/brokers/1", "/api/brokers/1"),
]


@pytest.mark.parametrize("page, api", PAGES)
def test_every_page_and_its_json_twin_answer_with_the_security_headers(cluster, page, api):
    for console in (cluster.readonly.port, cluster.embedded_port):
        html = http(console, "GET", page)
        assert html.status == 200, html.body[:800]
        assert html.headers["content-type"] == "text/html; charset=utf-8"
        assert html.text.startswith("<!doctype html>")
        assert_secure(html)
        data = http(console, "GET", api)
        assert data.status == 200
        assert data.headers["content-type"] == "application/json; charset=utf-8"
        assert_secure(data)
        data.json()


def test_static_files_and_metrics_carry_the_security_headers_too(cluster):
    for path, content_type in [("/static/console.css", "text/css"), ("/static/live.js", "text/javascript"),
                               ("/metrics", "text/plain")]:
        response = cluster.readonly.get(path)
        assert response.status == 200 and response.headers["content-type"].startswith(content_type)
        assert_secure(response)
    missing = cluster.readonly.get("/static/../app.py")
    assert missing.status == 404
    assert_secure(missing)


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


def test_hostile_names_are_escaped_everywhere(cluster):
    for path in ["/", "/groups", f"/groups/{quote(HOSTILE_GROUP, safe='')}", f"/topics/{quote(HOSTILE_TOPIC, safe='')}",
                 f"/topics/{quote(HOSTILE_TOPIC, safe='')}/1-0/messages", "/brokers/1"]:
        response = cluster.readonly.get(path)
        assert response.status == 200, path
        assert "<script>alert(1)" not in response.text and "<img src=x" not in response.text
    assert "&#34;&gt;&lt;script&gt;alert(1)" in cluster.readonly.get("/").text
    unknown = cluster.readonly.get("/groups/%3Cscript%3Ealert(3)")
    assert unknown.status == 404 and "&lt;script&gt;alert(3)" in unknown.text and "<script>alert(3)" not in unknown.text


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


def metric_families(port: int) -> dict:
    body = http(port, "GET", "/metrics").text
    return {family.name: family for family in text_string_to_metric_families(body)}


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


# -- security: host check, the write action ------------------------------------------------------------

def test_a_console_on_loopback_refuses_other_host_names(cluster):
    response = cluster.readonly.get("/api/overview", headers={"Host": "attacker.example:8080"})
    assert response.status == 421
    assert cluster.readonly.get("/api/overview", headers={"Host": "localhost"}).status == 200


def form(**fields: str) -> bytes:
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in fields.items()).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def csrf_of(console: ConsoleProcess, group: str) -> tuple[str, str]:
    """The (cookie header, token) a browser gets from the group page."""
    page = console.get(f"/groups/{group}")
    (cookie,) = [c for c in page.cookies if c.startswith("tb_console_csrf=")]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    return cookie.split(";", 1)[0], token


def test_the_write_action_is_off_by_default(cluster):
    assert 'id="reset-offsets"' not in cluster.readonly.get("/groups/stopped").text
    response = http(cluster.readonly.port, "POST", "/groups/stopped/reset-offsets", headers=FORM,
                    body=form(topic="orders", to="latest"))
    assert response.status == 403 and "--allow-admin-actions" in response.text
    assert cluster.zk_offset("stopped", "orders", "0-0") == 0
    assert http(cluster.embedded_port, "POST", "/groups/stopped/reset-offsets", headers=FORM,
                body=form(topic="orders", to="latest")).status == 403


def test_forged_resets_are_refused(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")
    url = "/groups/stopped/reset-offsets"
    attempts = [
        ({**FORM}, form(topic="orders", to="latest", csrf_token=token)),  # no cookie
        ({**FORM, "Cookie": cookie}, form(topic="orders", to="latest")),  # no token
        ({**FORM, "Cookie": cookie}, form(topic="orders", to="latest", csrf_token="0" * 64)),
        ({**FORM, "Cookie": cookie, "Origin": "http://evil.example"},
         form(topic="orders", to="latest", csrf_token=token)),
        ({**FORM, "Cookie": "tb_console_csrf=" + "a" * 43}, form(topic="orders", to="latest", csrf_token=token)),
    ]
    for headers, body in attempts:
        response = http(cluster.admin.port, "POST", url, headers=headers, body=body)
        assert response.status == 403, (headers, body)
        assert "refused" in response.text
    assert cluster.zk_offset("stopped", "orders", "0-0") == 0


def test_a_reset_is_refused_while_the_group_has_live_owners(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")  # one token per browser, valid for every group
    assert 'id="reset-offsets"' not in cluster.admin.get("/groups/live").text  # no form for a live group
    response = http(cluster.admin.port, "POST", "/groups/live/reset-offsets",
                    headers={**FORM, "Cookie": cookie, "Origin": f"http://127.0.0.1:{cluster.admin.port}"},
                    body=form(topic="orders", to="earliest", csrf_token=token))
    assert response.status == 409 and "live consumers (live_m1)" in response.text
    assert cluster.zk_offset("live", "orders", "0-0") == cluster.latest["0-0"]


def test_a_stopped_groups_offsets_are_reset(cluster):
    cookie, token = csrf_of(cluster.admin, "stopped")
    assert 'id="reset-offsets"' in cluster.admin.get("/groups/stopped", headers={"Cookie": cookie}).text
    response = http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets",
                    headers={**FORM, "Cookie": cookie, "Origin": f"http://127.0.0.1:{cluster.admin.port}"},
                    body=form(topic="orders", to="latest", csrf_token=token))
    assert response.status == 200, response.text
    for name, end in cluster.latest.items():
        assert cluster.zk_offset("stopped", "orders", name) == end
        assert f"<td>{name}</td><td class=\"num\">0</td><td class=\"num\">{end}</td>" in response.text
    wait_for(lambda: cluster.admin.api("/api/groups/stopped")["lag"]["total"] == 0, "the console to see it")
    # Back to the start of the log, through a time before everything: the earliest offset.
    http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets",
         headers={**FORM, "Cookie": cookie}, body=form(topic="orders", to="time", time="2001-01-01T00:00:00",
                                                       csrf_token=token))
    assert all(cluster.zk_offset("stopped", "orders", name) == 0 for name in cluster.latest)
    bad = http(cluster.admin.port, "POST", "/groups/stopped/reset-offsets", headers={**FORM, "Cookie": cookie},
               body=form(topic="orders", to="whenever", csrf_token=token))
    assert bad.status == 400
    assert http(cluster.admin.port, "GET", "/groups/stopped/reset-offsets").status == 405


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
    row = {p["name"]: p for p in cluster.readonly.api("/api/topics/orders")["partitions"]}.get("1-0")
    assert row is None  # its topic registrations went with it
    group = cluster.readonly.api("/api/groups/stopped")
    rows = {p["partition"]: p for p in group["partitions"]}
    assert rows["1-0"]["registered"] is False and rows["1-0"]["latest"] is None and rows["1-0"]["lag"] is None
    assert group["lag"]["complete"] is False
    assert "(not registered)" in cluster.readonly.get("/groups/stopped").text
