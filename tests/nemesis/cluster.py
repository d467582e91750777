"""The nemesis run's cluster: the network namespaces, a three-node ZooKeeper ensemble, five
brokers (one of them on the ``Disk``), and the topics: each replicated to 3 brokers with
min.insync.replicas=2. ``start`` builds it all, ``heal_everything`` undoes every fault the
nemesis may have left, ``close`` removes every process, mount and namespace (idempotent: the
watchdog and the normal end may both call it)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.nemesis.checker import recovery_problem
from tests.nemesis.clients import ACKS_ONE, IDEMPOTENT, ZERO_SEVEN
from tests.nemesis.netns import Network
from tests.nemesis.nodes import ZK_PORT, Broker, Disk, ZooKeeperMember
from tests.support.replicated_cluster import Wire
from twisted_broker.local_zookeeper import Peer, server_mode

TOPICS = [IDEMPOTENT, ACKS_ONE, ZERO_SEVEN]
CHROOT = "/nemesis"
BROKERS, ZOOKEEPERS = 5, 3
DISK_BROKER = f"b{BROKERS - 1}"
TICK_MS = 250


def broker_properties(partitions: int) -> dict[str, str]:
    return {"zk.sessiontimeout.ms": "4000", "zk.connectiontimeout.ms": "10000",
            "replica.lag.time.max.ms": "4000", "replica.fetch.wait.max.ms": "200",
            "default.replication.factor": "3", "min.insync.replicas": "2", "num.partitions": str(partitions),
            "unclean.leader.election.enable": "false", "log.flush.interval": "10000",
            "log.default.flush.interval.ms": "1000", "log.default.flush.scheduler.interval.ms": "200",
            "controlled.shutdown.max.ms": "5000", "log.file.size": str(1 << 20)}


class Cluster:
    def __init__(self, root: Path, tag: str = "x", net: int = 77, partitions: int = 3) -> None:
        self.root, self.partitions = root, partitions
        self.network = Network(tag, net)
        self.zookeepers: dict[str, ZooKeeperMember] = {}
        self.brokers: dict[str, Broker] = {}
        self.disk = Disk(root / "disk.img", root / DISK_BROKER / "disk")
        self._closed = threading.Lock()
        self.closed = False

    @property
    def by_id(self) -> dict[int, Broker]:
        return {b.broker_id: b for b in self.brokers.values()}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def wire_addresses(self) -> list[tuple[str, int]]:
        return [b.wire_address for b in self.brokers.values()]

    def start(self) -> None:
        self.network.create()
        names = [f"zk{i}" for i in range(1, ZOOKEEPERS + 1)]
        addresses = {name: self.network.add(name, 20 + i) for i, name in enumerate(names, 1)}
        peers = [Peer(i, addresses[n], ZK_PORT, 2888, 3888) for i, n in enumerate(names, 1)]
        for i, name in enumerate(names, 1):
            self.zookeepers[name] = ZooKeeperMember(self.network, name, self.root / name, i, peers, TICK_MS)
        for member in self.zookeepers.values():
            member.launch()
        for member in self.zookeepers.values():
            member.start_wait()
        self.wait_for_quorum()
        zk_connect = ",".join(m.connect for m in self.zookeepers.values())
        self._make_chroot(zk_connect)
        self.disk.create()
        for i in range(BROKERS):
            name = f"b{i}"
            self.network.add(name, 10 + i)
            log_dir = self.disk.mount_point / "logs" if name == DISK_BROKER else None
            self.brokers[name] = Broker(self.network, name, self.root / name, i, zk_connect + CHROOT,
                                        broker_properties(self.partitions), log_dir)
        for broker in self.brokers.values():
            if not broker.start(90):
                raise RuntimeError(f"broker {broker.name} did not start; see {broker.directory}")
        self._wait(lambda: all(self._sees_all(b) for b in self.brokers.values()), 60, "every broker to see the others")
        self._wait(lambda: self._create_topics() is None, 90, "the topics, led and in sync")

    def _make_chroot(self, zk_connect: str) -> None:
        from kazoo.client import KazooClient
        client = KazooClient(hosts=zk_connect)
        client.start(30)
        try:
            client.ensure_path(CHROOT)
        finally:
            client.stop()
            client.close()

    def wait_for_quorum(self, timeout_s: float = 90.0) -> None:
        def quorum():
            modes = sorted(str(server_mode(m.address, ZK_PORT)) for m in self.zookeepers.values())
            return modes == ["follower"] * (len(modes) - 1) + ["leader"]
        self._wait(quorum, timeout_s, "a ZooKeeper quorum")

    @staticmethod
    def _wait(condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s} s")
            time.sleep(0.5)

    def _sees_all(self, broker: Broker) -> bool:
        try:
            with Wire.at(broker.wire_address, timeout_s=3.0) as wire:
                return len(wire.metadata().brokers) == BROKERS
        except (OSError, ConnectionError, AssertionError):
            return False

    def _create_topics(self) -> str | None:
        try:
            with Wire.at(self.brokers["b0"].wire_address, timeout_s=5.0) as wire:
                wire.metadata(*TOPICS)  # creates them, as a producer's request does
        except (OSError, ConnectionError, AssertionError) as e:
            return repr(e)
        return recovery_problem(self.brokers, TOPICS)

    def heal_everything(self) -> list[str]:
        """Undo whatever a fault left (the nemesis heals each one; this is the safety net)."""
        notes = []
        self.network.heal_all()
        for node in [*self.zookeepers.values(), *self.brokers.values()]:
            if node.paused:
                node.resume()
        if self.disk.failed:
            self.brokers[DISK_BROKER].kill()
            self.disk.repair()
            notes.append("disk repaired")
        self.disk.unfill()
        for member in self.zookeepers.values():
            if not member.running:
                member.start()
                notes.append(f"{member.name} started")
        for broker in self.brokers.values():
            if not broker.running:
                notes.append(f"{broker.name} started" + ("" if broker.start(90) else " but FAILED"))
        return notes

    def close(self) -> None:
        with self._closed:
            if self.closed:
                return
            self.closed = True
            for node in [*self.brokers.values(), *self.zookeepers.values()]:
                node.close()
            self.disk.close()
            self.network.close()
