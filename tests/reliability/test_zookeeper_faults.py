"""ZooKeeper faults under load: the server stopped and restarted, sessions expired by force.

Two brokers (2 partitions each) registered in a ZooKeeper of this test's own, a producer
thread sending numbered messages to every partition, and a group of two consumer processes
(group_member.py, committing every 20 messages). Faults, each followed by a wait for the
group to be fully rebalanced (both brokers and both members registered, every partition
owned by a live member, a message produced after the fault consumed on every partition):

- ZooKeeper stopped for longer than the session timeout, then started again; the time from
  its return to the fully rebalanced group is measured and printed;
- a broker's session expired by force (the process frozen with SIGSTOP past the timeout):
  it registers again;
- a consumer's session expired the same way: the group rebalances without it, then with it.

At the end every produced message has been consumed (none skipped), and every duplicate is
within the at-least-once window: its offset was not yet committed when the fault began.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.faults import group_member
from tests.support.reliability import record
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.local_zookeeper import ZooKeeperServer, free_port
from twisted_broker.registry import paths

ROOT = Path(__file__).resolve().parents[2]
GROUP_MEMBER = Path(group_member.__file__)
TOPIC, GROUP = "events", "g"
SESSION_MS = 2000
FROZEN_S = 3.5  # past the session timeout: the server expires the session


@pytest.fixture
def own_zookeeper(tmp_path):
    """A ZooKeeper this test may stop and start (a fixed port, the same data directory)."""
    server = ZooKeeperServer(tmp_path / "zookeeper", port=free_port(), tick_time_ms=200)
    server.start()
    yield server
    server.stop()


class Member:
    """One group_member.py process; its events are stamped and collected by a thread."""

    def __init__(self, zk_connect: str, name: str, events: list, lock: threading.Lock) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(GROUP_MEMBER), zk_connect, GROUP, TOPIC, name,
             "--session-timeout-ms", str(SESSION_MS)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._events, self._lock = events, lock
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["member"] = self.name
            if event["event"] == "ready":
                self.ready.set()
            with self._lock:
                self._events.append(event)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class NumberedProducer(threading.Thread):
    """Sends ``m<n>`` messages round-robin to every partition of every broker."""

    def __init__(self, brokers) -> None:
        super().__init__(daemon=True)
        self.brokers = brokers
        self.sent: dict[str, float] = {}  # payload -> time sent
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        producers = [SyncProducer("127.0.0.1", broker.port, socket_timeout_ms=30000) for broker in self.brokers]
        number = 0
        while not self._halt.is_set():
            for producer in producers:
                for partition in range(2):
                    payload = f"m{number}"
                    try:
                        producer.send(TOPIC, partition, encode_message_set([payload.encode()]))
                    except OSError as exc:
                        self.errors.append(repr(exc))
                        continue
                    self.sent[payload] = time.time()
                    number += 1
            time.sleep(0.005)
        for producer in producers:
            producer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def fully_rebalanced(zk: KazooClient, members: list[Member], events: list, lock, since: float) -> bool:
    """Both brokers and members registered, every partition owned by a live member, and a
    message produced after ``since`` consumed from every partition."""
    try:
        if sorted(zk.get_children("/brokers/ids")) != ["0", "1"]:
            return False
        if sorted(zk.get_children(f"/brokers/topics/{TOPIC}")) != ["0", "1"]:
            return False
        ids = zk.get_children(f"/consumers/{GROUP}/ids")
        if len(ids) != len(members):
            return False
        owners_path = paths.owners_path(GROUP, TOPIC)
        names = zk.get_children(owners_path) if zk.exists(owners_path) else []
        if sorted(names) != ["0-0", "0-1", "1-0", "1-1"]:
            return False
        threads = {f"{consumer_id}-0" for consumer_id in ids}
        for name in names:
            if paths.decode_owner(zk.get(f"{owners_path}/{name}")[0]) not in threads:
                return False
    except Exception:  # noqa: BLE001 - a node vanished mid-check, or the connection is back only now
        return False
    with lock:
        fresh = {event["partition"] for event in events
                 if event["event"] == "message" and event["t"] > since + 0.05}
    return fresh == {"0-0", "0-1", "1-0", "1-1"}


def wait_rebalanced(zk_hosts: str, members, events, lock, since: float, timeout_s: float = 60.0) -> float:
    """Seconds from ``since`` until the group is fully rebalanced."""
    zk = KazooClient(hosts=zk_hosts)
    zk.start(20)
    try:
        deadline = time.monotonic() + timeout_s
        while not fully_rebalanced(zk, members, events, lock, since):
            if time.monotonic() > deadline:
                pytest.fail(f"the group did not rebalance within {timeout_s} s")
            time.sleep(0.05)
        return time.time() - since
    finally:
        zk.stop()
        zk.close()


def committed_offsets(zk_hosts: str) -> dict[str, int]:
    """The group's committed offset of every partition, as ZooKeeper holds it now."""
    zk = KazooClient(hosts=zk_hosts)
    zk.start(20)
    try:
        path = f"/consumers/{GROUP}/offsets/{TOPIC}"
        return {name: int(zk.get(f"{path}/{name}")[0]) for name in zk.get_children(path)} if zk.exists(path) else {}
    finally:
        zk.stop()
        zk.close()


def freeze(process: subprocess.Popen, seconds: float) -> None:
    process.send_signal(signal.SIGSTOP)
    time.sleep(seconds)
    process.send_signal(signal.SIGCONT)


def test_zookeeper_restart_and_expired_sessions_lose_no_message(own_zookeeper, brokers, scale, request):
    chroot = "/reliability"
    setup = KazooClient(hosts=own_zookeeper.connect_string)
    setup.start(10)
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()
    zk_connect = own_zookeeper.connect_string + chroot
    properties = {"num.partitions": "2", "zk.sessiontimeout.ms": str(SESSION_MS)}
    cluster = [brokers(f"broker{i}", broker_id=i, zk_connect=zk_connect, properties=properties).start()
               for i in range(2)]
    producer = NumberedProducer(cluster)
    producer.start()
    events: list[dict] = []
    lock = threading.Lock()
    members = [Member(zk_connect, f"m{i}", events, lock) for i in range(2)]
    faults: list[tuple[str, float, dict[str, int]]] = []  # name, start, committed offsets then
    timings: dict[str, list[float]] = defaultdict(list)
    try:
        for member in members:
            assert member.ready.wait(60), "a member did not start"
        wait_rebalanced(zk_connect, members, events, lock, time.time())
        for _ in range(scale.zk_faults):
            faults.append(("zookeeper restart", time.time(), committed_offsets(zk_connect)))
            own_zookeeper.stop()
            time.sleep(SESSION_MS / 1000 + 1.0)
            own_zookeeper.start()
            timings["zookeeper restart"].append(wait_rebalanced(zk_connect, members, events, lock, time.time()))

            faults.append(("broker session expired", time.time(), committed_offsets(zk_connect)))
            freeze(cluster[1].process, FROZEN_S)
            timings["broker session expired"].append(wait_rebalanced(zk_connect, members, events, lock, time.time()))

            faults.append(("consumer session expired", time.time(), committed_offsets(zk_connect)))
            freeze(members[0].process, FROZEN_S)
            timings["consumer session expired"].append(wait_rebalanced(zk_connect, members, events, lock, time.time()))
        producer.stop()
        assert not producer.errors, producer.errors[:3]
        deadline = time.monotonic() + 60
        while True:
            with lock:
                consumed = {event["payload"] for event in events if event["event"] == "message"}
            missing = set(producer.sent) - consumed
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert cluster[1].log_tail(1 << 22).count("will register again") >= scale.zk_faults
    finally:
        producer.stop()
        for member in members:
            member.stop()

    assert not missing, f"{len(missing)} messages never consumed, e.g. {sorted(missing)[:5]}"
    with lock:
        deliveries = [event for event in events if event["event"] == "message"]
    duplicates = check_at_least_once_window(deliveries, faults)
    record(request, faults_injected=len(faults), cases_tried=len(faults),
           messages_checked=len(producer.sent), messages_lost=len(missing))
    summary = ", ".join(f"{name}: {' / '.join(f'{t:.2f}' for t in times)} s" for name, times in timings.items())
    print(f"\nrebalanced after {summary}; {len(producer.sent)} messages, {duplicates} duplicates")


def check_at_least_once_window(deliveries: list[dict], faults: list[tuple[str, float, dict[str, int]]]) -> int:
    """Assert each repeated delivery is within the at-least-once window of a fault between its
    two deliveries: its offset was not committed in ZooKeeper yet when that fault began. The
    faults considered are those that began after the first delivery, and the one under way
    then: a session expired by one fault can hand a partition over (from the offset committed
    at that fault) after the next fault has begun. Return the number of repeated deliveries."""
    first_seen: dict[tuple[str, int, str], float] = {}
    duplicates = 0
    for event in sorted(deliveries, key=lambda e: e["t"]):
        key = (event["partition"], event["offset"], event["payload"])
        if key in first_seen:
            duplicates += 1
            before = [(start, committed) for _name, start, committed in faults if start <= event["t"]]
            assert before, f"a duplicate before any fault: {event}"
            under_way = [f for f in before if f[0] <= first_seen[key]][-1:]
            windows = under_way + [f for f in before if f[0] > first_seen[key]]
            committed = [c.get(event["partition"], 0) for _start, c in windows]
            assert any(event["offset"] >= c for c in committed), \
                f"{event} was redelivered though offsets {committed} were committed when the faults since its first delivery began"
        else:
            first_seen[key] = event["t"]
    return duplicates
