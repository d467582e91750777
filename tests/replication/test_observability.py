"""What operators see of replication, on three real brokers, each with its admin console
(``--webui``) and debug port (``--debug``), and a standalone console (``twistd -n webui``)
that has only ZooKeeper: after a follower is killed -9, its leader's ``/metrics`` and ``mntr``
count an under-replicated partition and an ISR shrink, the consoles show the ISR without it,
and once it is back, the ISR expand; the overview names the controller."""

from __future__ import annotations

import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.brokers import BrokerProcess, DebugSession
from tests.support.console_process import ConsoleProcess, http, wait_for_port_file
from tests.support.replicated_cluster import Wire, produce_once_led

TOPIC = "watched"


def start_observed(cluster, broker_id: int) -> BrokerProcess:
    """Broker ``broker_id`` with a console and a debug port on free loopback ports."""
    broker = cluster.brokers.get(broker_id)
    if broker is None:
        directory = cluster.root / f"broker-{broker_id}"
        broker = cluster.brokers[broker_id] = BrokerProcess(
            directory, broker_id=broker_id, zk_connect=cluster.zk_connect, properties=cluster.properties,
            extra_args=["--webui", "tcp:0:interface=127.0.0.1", "--webui-port-file", str(directory / "webui-port"),
                        "--debug", "tcp:0:interface=127.0.0.1", "--debug-port-file", str(directory / "debug-port")])
    for name in ("webui-port", "debug-port"):
        (broker.directory / name).unlink(missing_ok=True)
    broker.start()
    broker.webui_port = wait_for_port_file(broker.directory / "webui-port", broker.process, 30)
    broker.debug_port = wait_for_port_file(broker.directory / "debug-port", broker.process, 30)
    return broker


def metrics(broker: BrokerProcess) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of the broker's ``/metrics``."""
    response = http(broker.webui_port, "GET", "/metrics")
    assert response.status == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def figure(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def api(port: int, path: str):
    response = http(port, "GET", path)
    assert response.status == 200, (path, response.status, response.body[:300])
    return response.json()


def mntr(broker: BrokerProcess) -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", broker.debug_port), timeout=10) as sock:
        sock.sendall(b"mntr\n")
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return dict(line.split("\t") for line in data.decode().splitlines() if "\t" in line)


@pytest.fixture
def observed(replicated_cluster, tmp_path):
    for broker_id in range(3):
        start_observed(replicated_cluster, broker_id)
    console = ConsoleProcess(tmp_path / "console", replicated_cluster.zk_connect, "--lag-sample-interval", "60")
    yield replicated_cluster, console.start()
    console.stop()


def test_a_killed_follower_shows_as_an_isr_shrink_and_comes_back_as_an_expand(observed):
    cluster, console = observed
    cluster.create(TOPIC)  # factor 3, 2 partitions (the fixture's defaults), every replica in sync
    leader_id = cluster.leaders(TOPIC)[0]
    leader = cluster.brokers[leader_id]
    with Wire(leader) as wire:
        assert produce_once_led(wire, TOPIC, 0, [b"m%d" % i for i in range(20)])[0] == 0
    follower_id = next(b for b in range(3) if b != leader_id)
    follower = cluster.brokers[follower_id]

    # Before: fully replicated, and the follower reports its lag behind the leader.
    before = metrics(leader)
    assert figure(before, "twisted_broker_under_replicated_partitions", broker=leader_id) == 0
    assert figure(before, "twisted_broker_leader_count", broker=leader_id) >= 1
    cluster.wait_for(lambda: figure(metrics(follower), "twisted_broker_follower_lag_bytes", broker=follower_id,
                                    topic=TOPIC, partition=0, leader=leader_id) == 0, what="the follower caught up")
    shrinks_before = figure(before, "twisted_broker_isr_shrinks_total", broker=leader_id)

    follower.kill()
    # The partition shows as under-replicated once the follower's registration is gone; the
    # ISR shrink is counted when its lag runs out, which on a loaded machine can come a moment
    # later: wait for a sample that has both.
    after = cluster.wait_for(lambda: (m := metrics(leader)) and figure(
        m, "twisted_broker_under_replicated_partitions", broker=leader_id) and figure(
        m, "twisted_broker_isr_shrinks_total", broker=leader_id) >= shrinks_before + 1 and m,
        what="an under-replicated partition and an ISR shrink on the leader's /metrics")
    assert figure(after, "twisted_broker_isr_shrinks_total", broker=leader_id) >= shrinks_before + 1
    assert figure(after, "twisted_broker_partition_in_sync_replicas", broker=leader_id, topic=TOPIC, partition=0) == 2
    figures = mntr(leader)
    assert int(figures["tb_under_replicated_partitions"]) >= 1
    assert int(figures["tb_isr_shrinks"]) >= 1
    assert int(figures["tb_leader_count"]) >= 1
    assert figures["tb_server_state"] in ("controller", "broker")

    # Both consoles read the states from ZooKeeper: the ISR without the killed follower.
    for port in (leader.webui_port, console.port):
        page = cluster.wait_for(lambda: (p := api(port, f"/api/topics/{TOPIC}"))["partitions"][0]["under_replicated"]
                                and p, what="the console's ISR")
        row = page["partitions"][0]
        assert page["replicated"] and page["replication_factor"] == 3
        assert row["leader"] == leader_id and follower_id not in row["isr"] and follower_id in row["replicas"]
        assert follower_id in row["out_of_sync"] and not row["offline"]
    html = http(console.port, "GET", f"/topics/{TOPIC}").text
    assert 'data-mark="under-replicated"' in html
    # The leader's own console lists its replicas, with the dead follower out of the ISR.
    own = api(leader.webui_port, f"/api/brokers/{leader_id}")["replication"]
    led = next(r for r in own["replicas"] if (r["topic"], r["partition"]) == (TOPIC, 0))
    assert led["role"] == "leader" and follower_id not in led["isr"] and own["under_replicated_partitions"] >= 1

    # The overview names the controller, which says so itself on its debug port.
    overview = cluster.wait_for(lambda: (o := api(console.port, "/api/overview"))["controller"]
                                and o["controller"]["id"] in {b.broker_id for b in cluster.live()} and o,
                                what="a live controller")
    controller = cluster.brokers[overview["controller"]["id"]]
    assert mntr(controller)["tb_controller"] == "1"
    assert overview["totals"]["under_replicated_partitions"] >= 1
    assert overview["totals"]["replicated_topics"] == 1
    assert [t for t in overview["topics"]["items"] if t["name"] == TOPIC][0]["replication_factor"] == 3
    with DebugSession(controller.debug_port) as session:
        assert any(line.startswith("Mode: controller") for line in session.ask("srvr"))
        replicas = session.ask(f"replicas {TOPIC}")
        assert replicas[0].split()[:4] == ["topic", "partition", "role", "leader"]
        assert len(replicas) == 3  # the header and the two partitions

    # Back: it truncates, catches up and is expanded into the ISR again.
    start_observed(cluster, follower_id)
    cluster.wait_for(lambda: figure(metrics(leader), "twisted_broker_under_replicated_partitions",
                                    broker=leader_id) == 0, what="the ISR to grow back", timeout_s=30)
    assert figure(metrics(leader), "twisted_broker_isr_expands_total", broker=leader_id) >= 1
    assert int(mntr(leader)["tb_isr_expands"]) >= 1
