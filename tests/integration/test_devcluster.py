"""``make run`` (twisted_broker/devcluster.py): one broker exactly as server.properties says,
and ``make run BROKERS=3``: three real brokers on their documented ports and log dirs, in a
cluster that holds replicated topics, all stopped by one SIGINT (Ctrl-C)."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys

from kazoo.client import KazooClient

from tests.support.brokers import ROOT
from tests.support.cli import cli_env, run_cli
from tests.support.polling import wait_for
from twisted_broker import devcluster
from twisted_broker.registry.paths import BrokerInfo


def test_one_broker_is_run_as_server_properties_says():
    command = devcluster.broker_command(devcluster.plan_brokers(1, base_port=9092)[0])
    assert command[command.index("broker"):] == [
        "broker", "--config", "etc/server.properties",
        "--webui", "tcp:8080:interface=127.0.0.1", "--debug", "tcp:9093:interface=127.0.0.1"]
    assert devcluster.broker_command() == command


def test_three_brokers_get_their_own_ids_ports_and_log_dirs():
    plans = devcluster.plan_brokers(3, base_port=9092, kafka_port=9094)
    assert [(p.broker_id, p.port, p.kafka_port, p.console_port, p.debug_port, p.log_dir) for p in plans] == [
        (0, 9092, 9094, 8080, 9093, "var/broker-0/kafka-logs"),
        (1, 9192, 9194, 8081, 9193, "var/broker-1/kafka-logs"),
        (2, 9292, 9294, 8082, 9293, "var/broker-2/kafka-logs")]
    command = devcluster.broker_command(plans[2])
    assert command[command.index("broker"):] == [
        "broker", "--config", "etc/server.properties", "--broker-id", "2", "--port", "9292",
        "--log-dir", "var/broker-2/kafka-logs", "--kafka-endpoint", "tcp:9294:interface=127.0.0.1",
        "--webui", "tcp:8082:interface=127.0.0.1", "--debug", "tcp:9293:interface=127.0.0.1"]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return False
    return True


def _free_layout() -> tuple[int, int, int, int]:
    """Wire, console, debug and modern base ports whose three brokers' ports are all free now."""
    while True:
        base = random.randrange(20000, 40000, 1000)
        wire, console, debug, kafka = base, base + 50, base + 1, base + 2
        ports = [p for i in range(3) for p in (wire + 100 * i, console + i, debug + 100 * i, kafka + 100 * i)]
        if all(map(_free, ports)):
            return wire, console, debug, kafka


def test_three_brokers_form_a_cluster_and_ctrl_c_stops_them_all(zookeeper, zk_connect, tmp_path):
    wire, console, debug, kafka = _free_layout()
    (tmp_path / "etc").mkdir()
    # The session's ZooKeeper is already serving at zookeeper.cfg's address, so the launcher
    # leaves it alone; the brokers use the test's chroot.
    (tmp_path / "etc/zookeeper.cfg").write_text(
        f"dataDir=var/zookeeper\nclientPort={zookeeper.port}\nclientPortAddress=127.0.0.1\n")
    shipped = (ROOT / "etc/server.properties").read_text()
    (tmp_path / "etc/server.properties").write_text(
        shipped.replace("\nport=9092", f"\nport={wire}").replace("kafka.port=9094", f"kafka.port={kafka}")
        .replace("zk.connect=127.0.0.1:2181", f"zk.connect={zk_connect}")
        + "zk.sessiontimeout.ms=2000\n")
    output = tmp_path / "output.log"  # a file, not a pipe nobody reads while waiting
    with output.open("wb") as out:
        launcher = subprocess.Popen([sys.executable, "-m", "twisted_broker.devcluster", "--brokers", "3",
                                     "--console-port", str(console), "--debug-port", str(debug)],
                                    cwd=tmp_path, env=cli_env(), stdout=out, stderr=subprocess.STDOUT)
    client = KazooClient(hosts=zk_connect)
    client.start(10)
    try:
        def registered():
            ids = client.get_children("/brokers/ids") if client.exists("/brokers/ids") else []
            return {int(i): BrokerInfo.decode(int(i), client.get(f"/brokers/ids/{i}")[0]).port for i in ids}

        assert wait_for(lambda: len(registered()) == 3 and registered(), "three brokers", timeout_s=30) == {
            0: wire, 1: wire + 100, 2: wire + 200}
        for i in range(3):
            assert (tmp_path / f"var/broker-{i}/kafka-logs").is_dir()
            with socket.create_connection(("127.0.0.1", debug + 100 * i), timeout=5) as sock:
                sock.sendall(b"ruok\n")
                assert sock.recv(16).startswith(b"imok")
            socket.create_connection(("127.0.0.1", console + i), timeout=5).close()
            socket.create_connection(("127.0.0.1", kafka + 100 * i), timeout=5).close()
        created = run_cli("topics", "--zk", zk_connect, "--create", "--topic", "r", "--partitions", 3,
                          "--replication-factor", 3)
        assert created.returncode == 0, created.stderr.decode()
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(40) == 0, output.read_text()
        assert registered() == {}
        assert not any(_listening(port) for i in range(3) for port in (wire + 100 * i, debug + 100 * i, console + i,
                                                                   kafka + 100 * i))
        assert not (tmp_path / "var/kafka-logs").exists()  # one broker's log dir is not used
    finally:
        if launcher.poll() is None:  # SIGINT, so that it stops the brokers it started
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(40)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
        client.stop()
        client.close()
