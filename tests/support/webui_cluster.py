"""The cluster the admin console's tests (test_webui_*.py) read, and what starts it.

One cluster per test module (starting it takes a few seconds): ZooKeeper (a chroot of its own), two
brokers, broker 0 embedding a console (``--webui``), two standalone consoles (``twistd -n
webui``: one read-only as by default, one with ``--allow-admin-actions``), and consumer groups:

- ``live``: a real ZooKeeper consumer (client/zookeeper_consumer.py, in a process of its own,
  tests/support/consumer_group_member.py) that has consumed everything of ``orders``;
- ``stopped``, ``filters``, and a group with a hostile name: registry nodes written with kazoo
  as 0.7 consumers leave them (committed offsets of a stopped group; whitelist and blacklist
  registrations), since those states are hard to hold still with live consumers.

The consoles sample lag every 0.5 s here; every check of something that changes polls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from kazoo.client import KazooClient

from tests.support.brokers import BrokerProcess
from tests.support.zookeeper import new_chroot
from tests.support.console_process import ConsoleProcess, Response, wait_for_port_file
from tests.support.polling import wait_for
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import OffsetRequest, ProduceRequest, encode_request

HERE = Path(__file__).resolve().parent
HOSTILE_TOPIC = '"><script>alert(1)'
HOSTILE_GROUP = "g'><img src=x onerror=alert(2)>"
SCRIPT_PAYLOAD = b"<script>window.__pwned = 1; alert('payload')</script>"
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")


# -- support, also used by tests/browser -------------------------------------------------------

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
