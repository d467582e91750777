"""The scale benchmark's cluster (bench/scale.py): a ZooKeeper and N brokers with the modern
listener on loopback, what ZooKeeper says of every partition, and what /proc says of each broker.

- ``ScaleCluster`` is tests/support/kafka_clients/modern_cluster.py's ``ModernCluster`` (which
  is tests/support/replicated_cluster.py's ``ReplicatedCluster`` with a modern listener per
  broker, kept across restarts), imported from the test support rather than copied: the
  brokers are the same ``twistd -n broker`` processes the replication tests start. Its
  helpers fail with ``pytest.fail``; ``TestFailure`` names that exception for the bench.
  Unlike the tests' cluster it runs a ZooKeeper of its own, with ZooKeeper's usual 2 s tick
  (the tests' 200 ms tick caps sessions at 4 s), and etc/server.properties' settings.
- ``PartitionStates`` reads every partition's ``/replication/.../state`` node at once
  (kazoo's asynchronous gets, all in flight together) and counts what a phase waits for.
- ``process_figures`` reads a broker's CPU time, RSS and open descriptors from /proc; the CPU
  of its children (the fsync process of ``log.flush.worker=process``) is counted apart.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kafka_clients.modern_cluster import ModernCluster, free_port, wait_for_listener
from twisted_broker.local_zookeeper import ZooKeeperServer
from twisted_broker.properties import read_properties
from twisted_broker.registry import paths as registry_paths, replication_paths
from twisted_broker.registry.replication_paths import PartitionState

TestFailure = pytest.fail.Exception  # what the test support's waits raise at their deadline
ROOT = Path(__file__).resolve().parents[1]
ZK_TICK_MS = 2000  # etc/zookeeper.cfg's tickTime: sessions of 4 to 40 s
ZK_SESSION_TIMEOUT_MS = 6000  # Kafka's zookeeper.session.timeout.ms before 2.5 (18 s since)
# etc/server.properties' keys that name one broker or one machine's paths: the cluster sets them.
PER_BROKER_KEYS = {"brokerid", "broker.id", "hostname", "port", "log.dir", "zk.connect", "kafka.port"}
# What the bench must set beyond etc/server.properties, which leaves the replication keys at
# their defaults (replica.lag.time.max.ms 10000, replica.fetch.wait.max.ms 500,
# controlled.shutdown.enable true, controlled.shutdown.max.ms 5000) and the session at 0.7's
# 6000 ms default, which the tests' BrokerProcess would set to 2000: so it is said here.
# auto.create.topics.enable=false: a client's Metadata request for a topic that the
# CreateTopics has not reached yet would create a 0.7 topic of that name (seen in a first
# run: scale-098-0, whose replica the broker then could not hold).
BENCH_PROPERTIES = {"zk.sessiontimeout.ms": str(ZK_SESSION_TIMEOUT_MS), "auto.create.topics.enable": "false"}


def broker_properties() -> dict[str, str]:
    """etc/server.properties without its per-broker keys, plus BENCH_PROPERTIES."""
    etc = read_properties(ROOT / "etc" / "server.properties")
    return {**{k: v for k, v in etc.items() if k not in PER_BROKER_KEYS}, **BENCH_PROPERTIES}


class ScaleCluster(ModernCluster):
    """ZooKeeper (started by ``start_zookeeper``) and brokers 0..N-1 under ``root``."""

    def __init__(self, root: Path) -> None:
        self.zookeeper = ZooKeeperServer(root / "zookeeper", tick_time_ms=ZK_TICK_MS)
        super().__init__(root, "", broker_properties())
        self.stopped: set[int] = set()  # brokers paused by SIGSTOP: running, but not live

    def start_zookeeper(self) -> None:
        self.zookeeper.start()
        self.zk_connect = self.zookeeper.connect_string

    def start(self, broker_id: int, timeout_s: float = 120.0):
        """Start (or restart) a broker and wait for its modern listener; a restart after
        kill -9 recovers 600 logs first, so the wait is longer than the tests' 30 s."""
        kafka_port = self.kafka_ports.setdefault(broker_id, free_port())
        if broker_id not in self.brokers:
            super().start(broker_id)  # creates the BrokerProcess with kafka.port, waits 30 s
            return self.brokers[broker_id]
        broker = self.brokers[broker_id].start(timeout_s)
        if wait_for_listener(broker, kafka_port, timeout_s) is None:
            raise TimeoutError(f"broker {broker_id}'s kafka.port {kafka_port} did not answer in {timeout_s} s")
        return broker

    def live(self):
        return [b for b in super().live() if b.broker_id not in self.stopped]

    def live_ids(self) -> set[int]:
        return {b.broker_id for b in self.live()}

    def pid(self, broker_id: int) -> int:
        return self.brokers[broker_id].process.pid

    def zookeeper_pid(self) -> int | None:
        process = self.zookeeper._process  # ZooKeeperServer keeps its Popen private; only read here
        return process.pid if process is not None else None

    def stop_everything(self) -> list[str]:
        """SIGKILL every broker, wait for its children (they exit when it does), stop ZooKeeper;
        returns what had to be killed by pid after its parent died (nothing, normally)."""
        leftovers = []
        for broker in self.brokers.values():
            if broker.process is None or broker.process.poll() is not None:
                continue
            children = child_pids(broker.process.pid)
            broker.kill()  # SIGKILL ends a process paused by SIGSTOP too
            deadline = time.monotonic() + 10
            while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
                time.sleep(0.1)
            for pid in children:
                if _alive(pid):
                    leftovers.append(f"broker {broker.broker_id}'s child {pid}")
                    os.kill(pid, signal.SIGKILL)
        self.zookeeper.stop()
        return leftovers


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


# -- ZooKeeper's view of every partition ------------------------------------------------------

class PartitionStates:
    """Every partition's state node, read in one sweep of asynchronous gets (a kazoo client
    of the bench's own, inside the cluster's ZooKeeper). ``sweep_s`` keeps each sweep's time:
    the bench's own load on ZooKeeper."""

    def __init__(self, zk_connect: str, partitions: list[tuple[str, int]]) -> None:
        from kazoo.client import KazooClient
        self.partitions = partitions
        self._paths = [replication_paths.state_path(t, p) for t, p in partitions]
        self._client = KazooClient(hosts=zk_connect, timeout=30)
        self._client.start(30)
        self.sweep_s: list[float] = []

    def read(self) -> dict[tuple[str, int], PartitionState | None]:
        """{(topic, partition): its state, or None if it has none yet}."""
        from kazoo.exceptions import NoNodeError
        started = time.monotonic()
        pending = [self._client.get_async(path) for path in self._paths]
        found = {}
        for key, result in zip(self.partitions, pending):
            try:
                value, _stat = result.get(timeout=60)
                found[key] = PartitionState.decode(value)
            except NoNodeError:
                found[key] = None
        self.sweep_s.append(time.monotonic() - started)
        return found

    def registered(self, broker_id: int) -> bool:
        """Whether the broker's ephemeral /brokers/ids node (its ZooKeeper session) exists."""
        return self._client.exists(registry_paths.broker_id_path(broker_id)) is not None

    def controller(self) -> int | None:
        from kazoo.exceptions import NoNodeError
        try:
            value, _stat = self._client.get(replication_paths.CONTROLLER)
        except NoNodeError:
            return None
        return replication_paths.ControllerInfo.decode(value).broker_id

    def close(self) -> None:
        self._client.stop()
        self._client.close()


def led(states, live: set[int]) -> int:
    """Partitions led by a live broker."""
    return sum(1 for s in states.values() if s is not None and s.leader in live)


def led_in_sync(states, live: set[int]) -> int:
    """Partitions led by a live broker that is in the partition's ISR."""
    return sum(1 for s in states.values() if s is not None and s.leader in live and s.leader in s.isr)


def full_isr(states, replicas: int, live: set[int]) -> int:
    """Partitions led by a live broker with ``replicas`` live members in their ISR."""
    return sum(1 for s in states.values()
               if s is not None and s.leader in live and len(set(s.isr) & live) == replicas)


def leader_counts(states) -> Counter:
    return Counter(s.leader for s in states.values() if s is not None and s.leader >= 0)


# -- /proc ---------------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def child_pids(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


def process_figures(pid: int) -> dict:
    """RSS (MiB) and open descriptors of ``pid``, and its children's RSS."""
    def rss_mib(p: int) -> float:
        try:
            match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{p}/status").read_text())
        except (FileNotFoundError, ProcessLookupError):
            return 0.0
        return int(match.group(1)) / 1024 if match else 0.0
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        fds = 0
    return {"rss_mib": round(rss_mib(pid), 1), "fds": fds,
            "children_rss_mib": round(sum(rss_mib(c) for c in child_pids(pid)), 1),
            "threads": len(list(Path(f"/proc/{pid}/task").glob("*")))}


class CpuMeter:
    """CPU used by each process (and its children) between ``__init__`` and ``cores()``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._started = time.monotonic()
        self._start = {name: self._sample(pid) for name, pid in pids.items()}
        self._machine = _machine_busy()

    @staticmethod
    def _sample(pid: int) -> tuple[float, float]:
        return cpu_seconds(pid), sum(cpu_seconds(c) for c in child_pids(pid))

    def cores(self) -> dict:
        """{name: {"cores": own, "children_cores": its children's}, "machine_busy_cores": all}."""
        elapsed = time.monotonic() - self._started
        found = {}
        for name, pid in self._pids.items():
            own, children = self._sample(pid)
            own0, children0 = self._start[name]
            found[name] = {"cores": round((own - own0) / elapsed, 4),
                           "children_cores": round(max(children - children0, 0.0) / elapsed, 4)}
        busy, total = _machine_busy()
        found["machine_busy_cores"] = round((busy - self._machine[0]) / max(total - self._machine[1], 1e-9)
                                            * os.cpu_count(), 3)
        return found


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


# -- the brokers' logs -------------------------------------------------------------------------

# twistd writes "<time> [<logger>#<level>] <message>"; a traceback's lines follow its record.
_NOTEWORTHY = re.compile(r"Traceback|Unhandled|#error\]|#critical\]")


def scan_log(path: Path, first: int = 8) -> dict:
    """Counts of tracebacks, errors and warnings in a twistd.log, and the first noteworthy lines."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return {"missing": True}
    lines = text.splitlines()
    noteworthy = [line[:300] for line in lines if _NOTEWORTHY.search(line)]
    # The most frequent warnings, with their numbers blanked ("... 12 partitions" -> "... N partitions").
    warnings = Counter(re.sub(r"\d+(\.\d+)?", "N", line.split("] ", 1)[-1])[:160]
                       for line in lines if "#warn]" in line)
    return {"lines": len(lines), "tracebacks": text.count("Traceback"),
            # kazoo's own line: a session the server expired (the broker's "will register
            # again" follows only once its reactor gets to the event).
            "zk_session_expiries": sum("Session has expired" in line for line in lines),
            "errors": sum("#error]" in line or "#critical]" in line for line in lines),
            "warnings": sum(warnings.values()), "top_warnings": warnings.most_common(6),
            "first_noteworthy": noteworthy[:first]}
