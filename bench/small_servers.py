"""The servers of issue 24's small-request rows (bench/small_requests.py), each started fresh
for one row and stopped after it: the floor (bench/small_floor.py in a process of its own),
one broker (bench/broker_process.py's ``BrokerProcess``, with the modern listener on
``kafka.port``), and three brokers with a ZooKeeper for the replicated row.

Each has ``port`` (0.7), ``modern_port`` and ``pid``: the process whose CPU a row reads
(the replicated topic's leader, for the cluster; ``pids`` lists all three).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.broker_process import BrokerProcess, stop_together
from bench.peers.harness import poll_until
from bench.peers.tbroker import BROKER_SETTINGS as LATENCY_SETTINGS
from bench.peers.tbroker_replicated import BROKER_SETTINGS as REPLICATED_SETTINGS, FACTOR, metadata

REPOSITORY = Path(__file__).resolve().parents[1]


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FloorProcess:
    """``python -m bench.small_floor`` with its data file under ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.process: subprocess.Popen | None = None
        self.port = self.modern_port = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self, timeout_s: float = 30.0) -> "FloorProcess":
        os.makedirs(self.directory, exist_ok=True)
        port_file = os.path.join(self.directory, "ports")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))}
        with open(os.path.join(self.directory, "stderr"), "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.small_floor", "--port-file", port_file,
                 "--data-file", os.path.join(self.directory, "log")],
                cwd=REPOSITORY, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(port_file):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the floor did not start:\n{Path(self.directory, 'stderr').read_text()[-2000:]}")
            time.sleep(0.02)
        self.port, self.modern_port = map(int, Path(port_file).read_text().split())
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class SingleBroker:
    """One ``twistd -n broker`` with the modern listener. ``settings``: bench/broker_process.py's
    defaults (flush every 10,000 messages or 1 s) unless given; ``zookeeper``: register in a
    ZooKeeper of its own (replication's requests, ProduceAck among them, need one)."""

    def __init__(self, directory: str, settings: dict[str, str] | None = None, zookeeper: bool = False) -> None:
        self.directory = directory
        self.settings = dict(settings or {})
        self.zookeeper = None
        self.use_zookeeper = zookeeper
        self.broker: BrokerProcess | None = None
        self.modern_port = 0

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def pid(self) -> int:
        return self.broker.process.pid

    @property
    def pids(self) -> list[int]:
        return [self.pid]

    def start(self) -> "SingleBroker":
        os.makedirs(self.directory, exist_ok=True)
        self.modern_port = free_loopback_port()
        properties = {**self.settings, "kafka.port": str(self.modern_port)}
        try:
            if self.use_zookeeper:
                from twisted_broker.local_zookeeper import ZooKeeperServer
                self.zookeeper = ZooKeeperServer(os.path.join(self.directory, "zookeeper"))
                self.zookeeper.start()
                properties.update({"enable.zookeeper": "true", "zk.connect": self.zookeeper.connect_string})
            self.broker = BrokerProcess(self.directory, properties).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            if self.broker is not None:
                self.broker.stop()
        finally:
            if self.zookeeper is not None:
                self.zookeeper.stop()
                self.zookeeper = None


def latency_broker(directory: str) -> SingleBroker:
    """bench/peers/tbroker.py's settings: each append asks for a flush (group commit), and a
    fetch at the end is held (fetch.wait.max.ms) until a flush publishes something."""
    return SingleBroker(directory, LATENCY_SETTINGS)


class ReplicatedCluster3:
    """FACTOR brokers and one ZooKeeper with bench/peers/tbroker_replicated.py's settings and a
    modern listener each. ``use(topic)`` creates a replicated topic (a 0.7 Metadata request:
    default.replication.factor=3), waits until all replicas are in sync, and points ``port``,
    ``modern_port`` and ``pid`` at its leader."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.zookeeper = None
        self.brokers: list[BrokerProcess] = []
        self.modern_ports: list[int] = []
        self.port = self.modern_port = self.pid = 0

    @property
    def pids(self) -> list[int]:
        return [broker.process.pid for broker in self.brokers]

    def start(self) -> "ReplicatedCluster3":
        from twisted_broker.local_zookeeper import ZooKeeperServer
        try:
            self.zookeeper = ZooKeeperServer(os.path.join(self.directory, "zookeeper"))
            self.zookeeper.start()
            for broker_id in range(FACTOR):
                home = os.path.join(self.directory, f"broker-{broker_id}")
                os.makedirs(home)
                self.modern_ports.append(free_loopback_port())
                broker = BrokerProcess(home, {**REPLICATED_SETTINGS, "brokerid": str(broker_id),
                                              "zk.connect": self.zookeeper.connect_string,
                                              "kafka.port": str(self.modern_ports[-1])})
                self.brokers.append(broker)
                broker.start()
            for broker in self.brokers:
                poll_until(lambda port=broker.port: len(metadata(port).brokers) == FACTOR,
                           "every broker to see the others", timeout_s=30, pause_s=0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def use(self, topic: str) -> None:
        def ready() -> bool:
            [answer] = metadata(self.brokers[0].port, topic).topics
            if answer.error:
                raise RuntimeError(f"{topic}: Metadata answered error {answer.error}")
            [partition] = answer.partitions
            return partition.leader >= 0 and len(partition.isr) == FACTOR

        poll_until(ready, f"{topic}: a leader and {FACTOR} in-sync replicas", timeout_s=30, pause_s=0.05)
        leader = metadata(self.brokers[0].port, topic).topics[0].partitions[0].leader
        self.port, self.modern_port = self.brokers[leader].port, self.modern_ports[leader]
        self.pid = self.brokers[leader].process.pid

    def stop(self) -> None:
        try:
            stop_together(self.brokers)
        finally:
            if self.zookeeper is not None:
                self.zookeeper.stop()
                self.zookeeper = None
