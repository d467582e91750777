"""twisted_broker with replication factor 3: three ``twistd -n broker`` processes on this
machine and one ZooKeeper, measured like the single broker (tbroker.py) beside it, so that
one run shows what a replicated topic costs (issue 15's done-when: produce in batches of 50
and consume at factor 3 at least 0.4x factor 1, committed latency p99 at most 2 ms).

Topics. Each test's topic is created by a Metadata request (codec/kafka07/replication.py) to broker
0: with ``default.replication.factor=3`` the broker creates it as a replicated topic of one
partition on all three brokers. ``create`` waits until its leader is elected and all three
replicas are in its ISR, so every figure is of three copies. The leader is whichever broker
the assignment put first (random per topic); the clients ask Metadata for it.

Visibility and fsync. A replicated topic's messages are visible once committed: appended on
every in-sync replica, in memory (docs/replication.md §6, ``log.visibility`` auto). The fsync
is a durability policy only, here etc/server.properties' (every 10,000 messages or 1 s), so
no row waits for a disk. A follower long-polls its leader (``replica.fetch.wait.max.ms``); the
leader answers it at the next append, so the wait bounds idle traffic, not latency.

Rows:
- produce b50 (acks=all): ProduceAck requests (acks -1) of one 50-message set each, to the
  leader. The broker answers the requests of one connection in order and takes the next only
  after answering (0.7 has no correlation ids), and an acks=all answer waits for the
  followers' next fetches; so the producer keeps ``CONNECTIONS`` connections (32) busy, each
  with ``IN_FLIGHT`` request(s) (1) written ahead: 32 acks=all producers of 50-message sets.
  The clock stops at the last acknowledgement: every message committed on three brokers and
  visible.
- produce b50 acks=1 (information): the same with acks 1 (answered at the leader's append),
  one connection with 32 requests written ahead; the clock stops when the leader's Offsets shows every message committed.
- consume: the single broker's SimpleConsumer loop (1 MiB 0.7 fetches) against the leader,
  which serves up to the high watermark.
- latency: the single broker's consumer loop against the leader, held by the broker
  (``fetch.wait.max.ms``) until the high watermark moves; the single broker's producer too
  (SyncProducer, one stamped message per 0.7 Produce request, 5,000/s) sending to the
  leader, which appends it with acks=all's checks. Only the visibility rule differs from
  factor 1's row. ``BENCH_RF3_LATENCY_ACKS=1`` sends ProduceAck requests with acks 1 instead,
  reading the answers as they come (acks=all would make each request wait for the one
  before it on its connection).
- produce b1 is not run: one acks=all request per message waits a replication round trip.
"""

from __future__ import annotations

import os
import select
import selectors
import socket
import subprocess
import sys
import time

from bench.broker_process import BrokerProcess, stop_together
from bench.peers.base import Go
from bench.peers.harness import ServerProcess, paced, payload_pool, poll_until, stamped_payload
from bench.peers.tbroker import FETCH_WAIT_MS, SEND_BUFFER, TwistedBroker, checkout_version, end_offset

FACTOR = 3
# The tuning knobs; the environment overrides them (workers inherit it).
# acks=all: connections to the leader, and requests written ahead on each. The leader appends
# what every connection sent before its followers' next fetch, so more connections mean more
# sets per follower fetch and per high-watermark step: on this machine 4 connections x 4 ahead
# made 125-150 k msgs/s, 16 x 1 130 k, 32 x 1 230-270 k, 64 x 1 240 k (one run each, loaded).
CONNECTIONS = int(os.environ.get("BENCH_RF3_CONNECTIONS") or 32)
IN_FLIGHT = int(os.environ.get("BENCH_RF3_IN_FLIGHT") or 1)
# acks=1: one connection with this many written ahead.
ACKS_1_IN_FLIGHT = 32
REPLICA_FETCH_WAIT_MS = int(os.environ.get("BENCH_RF3_REPLICA_FETCH_WAIT_MS") or 200)
ACK_TIMEOUT_MS = 30_000
_LATENCY_ACKS = os.environ.get("BENCH_RF3_LATENCY_ACKS") or "none"  # the latency producer: none (0.7 produce) or 1
LATENCY_ACKS = None if _LATENCY_ACKS == "none" else int(_LATENCY_ACKS)

BROKER_SETTINGS = {
    "default.replication.factor": str(FACTOR), "num.partitions": "1",
    "replica.fetch.wait.max.ms": str(REPLICA_FETCH_WAIT_MS), "zk.sessiontimeout.ms": "6000",
    "log.flush.interval": "10000", "log.default.flush.interval.ms": "1000",
    "log.default.flush.scheduler.interval.ms": "1000", "fetch.wait.max.ms": str(FETCH_WAIT_MS),
    "socket.send.buffer": str(SEND_BUFFER), "socket.receive.buffer": str(SEND_BUFFER),
    "log.file.size": str(1 << 30), "enable.zookeeper": "true",
    # The run's end stops every broker at once: nothing to hand over.
    "controlled.shutdown.enable": "false",
}
_ACK_HEAD = 4 + 2  # response size, error


class ReplicatedServer(ServerProcess):
    """ZooKeeper and brokers 0..factor-1 (FACTOR unless given); ``port`` is broker 0's, ``ports``
    every broker's. The brokers' logs are all under ``data_dir`` (disk bytes count every copy)."""

    name = "twisted_broker_rf3"

    def __init__(self, directory: str, factor: int = FACTOR) -> None:
        super().__init__(directory)
        self.factor = factor
        self.data_dir = os.path.join(directory, "data")
        self.zookeeper = None
        self.brokers: list[BrokerProcess] = []

    def start(self) -> "ReplicatedServer":
        from twisted_broker.local_zookeeper import ZooKeeperServer

        try:
            self.zookeeper = ZooKeeperServer(os.path.join(self.directory, "zookeeper"))
            self.zookeeper.start()
            for broker_id in range(self.factor):
                os.makedirs(os.path.join(self.directory, f"broker-{broker_id}"))
                broker = BrokerProcess(os.path.join(self.directory, f"broker-{broker_id}"), {
                    **BROKER_SETTINGS, "default.replication.factor": str(self.factor), "brokerid": str(broker_id),
                    "zk.connect": self.zookeeper.connect_string,
                    "log.dir": os.path.join(self.data_dir, f"broker-{broker_id}")})
                self.brokers.append(broker)
                broker.start()
            self.port = self.brokers[0].port
            self.log_file = self.brokers[0].log_file
            # A topic created before every broker sees the others could get fewer replicas.
            for port in self.ports:
                poll_until(lambda port=port: len(metadata(port).brokers) == self.factor,
                           f"broker on {port} to see {self.factor} brokers", timeout_s=30, pause_s=0.1)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def ports(self) -> list[int]:
        return [broker.port for broker in self.brokers]

    @property
    def pid(self) -> int | None:
        process = self.brokers[0].process if self.brokers else None
        return process.pid if process is not None else None

    def stop(self) -> None:
        try:
            stop_together(self.brokers)
        finally:
            self.brokers = []
            if self.zookeeper is not None:
                self.zookeeper.stop()
                self.zookeeper = None

    def log_tail(self) -> str:
        return "\n".join(f"broker {i}:\n{broker.log_tail(1500)}" for i, broker in enumerate(self.brokers))

    def version(self) -> str:
        return checkout_version()


def metadata(port: int, *topics: str):
    """The Metadata answer of the broker on ``port`` (creating ``topics`` as replicated)."""
    from twisted_broker.client.connection import BrokerConnection
    from twisted_broker.codec.kafka07.replication import MetadataRequest, decode_metadata, encode_replication_request

    connection = BrokerConnection("127.0.0.1", port)
    try:
        error, body = connection.request(encode_replication_request(MetadataRequest(tuple(topics))))
    finally:
        connection.close()
    if error:
        raise RuntimeError(f"Metadata answered error {error}")
    return decode_metadata(body)


def leader_port(ports: list[int], topic: str) -> int:
    """The port of the topic's (partition 0's) leader, as broker 0 knows it."""
    answer = metadata(ports[0], topic)
    leader = answer.topics[0].partitions[0].leader
    return {broker_id: port for broker_id, _host, port in answer.brokers}[leader]


def produce_ack_request(acks: int, topic: str, message_set: bytes) -> bytes:
    """A ProduceAck request of one set for partition 0, as sent."""
    from twisted_broker.codec.kafka07.replication import ProduceAckRequest, encode_replication_request
    from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest

    return encode_replication_request(ProduceAckRequest(
        acks, ACK_TIMEOUT_MS, MultiProduceRequest((ProduceRequest(topic, 0, message_set),))))


class _AckReader:
    """Reads ProduceAck answers from a non-blocking socket: counts them, raises on an error.
    ``outstanding``: requests written and not answered yet (the writer counts them up)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.answered = 0
        self.outstanding = 0

    def read(self) -> int:
        """Take what the socket holds; returns how many answers completed."""
        from twisted_broker.codec.kafka07.replication import decode_produce_acks

        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return 0
        if not data:
            raise ConnectionError("the broker closed the produce connection")
        buffer = self.buffer
        buffer += data
        done, pos = 0, 0
        while len(buffer) - pos >= 4:
            end = pos + 4 + int.from_bytes(buffer[pos:pos + 4], "big")
            if end > len(buffer):
                break
            for topic, partition, error, offset in decode_produce_acks(memoryview(buffer)[pos + _ACK_HEAD:end]):
                if error:
                    raise RuntimeError(f"{topic}-{partition}: produce answered error {error} (offset {offset})")
            done += 1
            pos = end
        del buffer[:pos]
        self.answered += done
        self.outstanding -= done
        return done


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    sock.setblocking(False)
    return sock


def _send_all(sock: socket.socket, data: bytes) -> None:
    """sendall on a non-blocking socket (a full send buffer waits until it drains)."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            select.select([], [sock], [], 1.0)  # until the broker has read some


class TwistedBrokerReplicated(TwistedBroker):
    key = "twisted_broker_rf3"
    label = "twisted_broker rf=3"
    factor = FACTOR
    skip = frozenset({"produce b1"})
    settings = {
        "server": f"{FACTOR} twistd -n broker processes on 127.0.0.1 and one ZooKeeper; each topic: 1 partition "
                  f"replicated on all {FACTOR} (created by a Metadata request, waited for until its ISR is all "
                  f"{FACTOR})",
        "persistence": "a message is visible once committed (on every in-sync replica, in memory); fsync every "
                       "10,000 messages or 1 s (etc/server.properties): durability only, no figure waits for it",
        "broker properties": ", ".join(f"{key}={value}" for key, value in BROKER_SETTINGS.items()),
        "produce": f"ProduceAck acks=all, 50-message sets, {CONNECTIONS} connections to the leader with "
                   f"{IN_FLIGHT} request(s) written ahead on each; done at the last acknowledgement (committed). "
                   f"acks=1 row: one connection, {ACKS_1_IN_FLIGHT} requests written ahead, done when Offsets shows all committed",
        "consume": "as twisted_broker's, from the leader (served up to the high watermark)",
        "latency": "as twisted_broker's (SyncProducer, 1 message per 0.7 Produce request; SimpleConsumer loop), "
                   "to and from the leader; the broker holds a caught-up fetch until the high watermark moves",
    }

    def make_server(self, directory: str) -> ReplicatedServer:
        return ReplicatedServer(directory, self.factor)

    def client_options(self, server: ReplicatedServer) -> dict:
        return {"ports": server.ports}

    def create(self, server: ReplicatedServer, dest: str) -> None:
        def ready() -> bool:
            [topic] = metadata(server.ports[0], dest).topics
            if topic.error:
                raise RuntimeError(f"{dest}: Metadata answered error {topic.error}: is it a 0.7 topic?")
            [partition] = topic.partitions
            return partition.leader >= 0 and len(partition.isr) == self.factor

        poll_until(ready, f"{dest}: a leader and {self.factor} in-sync replicas", timeout_s=30, pause_s=0.05)

    # -- worker side -----------------------------------------------------------------------------

    def roles(self) -> dict:
        return {"produce": self.produce, "consume": self.consume, "latency_consume": self.latency_consume,
                "latency_produce": self.latency_produce}

    def produce(self, *, ports: list[int], dest: str, n: int, batch: int, go: Go, acks: int = -1,
                connections: int = CONNECTIONS, in_flight: int = IN_FLIGHT, **_: object) -> dict:
        from twisted_broker.client.simple_consumer import SimpleConsumer
        from twisted_broker.codec.kafka07.message_set import encode_message_set

        port = leader_port(ports, dest)
        offsets = SimpleConsumer("127.0.0.1", port)
        start = end_offset(offsets, dest)
        if acks != -1:  # answered at the append: one connection keeps the leader busy
            connections, in_flight = 1, ACKS_1_IN_FLIGHT
        readers = [_AckReader(_connect(port)) for _ in range(connections)]
        selector = selectors.DefaultSelector()
        for reader in readers:
            selector.register(reader.sock, selectors.EVENT_READ, reader)
        pool = payload_pool()
        size = len(pool)
        requests = -(-n // batch)
        go()
        started = time.perf_counter()
        sent_bytes = written = 0
        sent = None
        while written < requests or any(reader.outstanding for reader in readers):
            for reader in readers:
                while written < requests and reader.outstanding < in_flight:
                    first = written * batch
                    message_set = encode_message_set([pool[i % size] for i in range(first, min(first + batch, n))])
                    _send_all(reader.sock, produce_ack_request(acks, dest, message_set))
                    sent_bytes += len(message_set)
                    reader.outstanding += 1
                    written += 1
            if written == requests and sent is None:
                sent = time.perf_counter()
            ready = selector.select(ACK_TIMEOUT_MS / 1000)
            if not ready:
                raise TimeoutError(f"{dest}: no answer within {ACK_TIMEOUT_MS} ms")
            for key, _events in ready:
                key.data.read()
        done = time.perf_counter()
        expected = start + sent_bytes
        if acks != -1:  # acknowledged at the leader's append: wait until committed
            poll_until(lambda: end_offset(offsets, dest) >= expected, f"{dest}: offset {expected}", pause_s=0.0005)
            done = time.perf_counter()
        end = end_offset(offsets, dest)
        for reader in readers:
            selector.unregister(reader.sock)
            reader.sock.close()
        offsets.close()
        if end != expected:
            raise RuntimeError(f"{dest}: committed end offset {end}, expected {expected}")
        return {"seconds": done - started, "sent_s": sent - started, "log_bytes": sent_bytes}

    def consume(self, *, ports: list[int], dest: str, n: int, go: Go, **_: object) -> dict:
        return super().consume(port=leader_port(ports, dest), dest=dest, n=n, go=go)

    def latency_consume(self, *, ports: list[int], dest: str, n: int, go: Go, **options: object) -> dict:
        return super().latency_consume(port=leader_port(ports, dest), dest=dest, n=n, go=go, **options)

    def latency_produce(self, *, ports: list[int], dest: str, n: int, rate: float, go: Go,
                        acks: int | None = LATENCY_ACKS, **_: object) -> dict:
        """``acks`` None: 0.7 Produce requests (no answer), as twisted_broker's row sends;
        else ProduceAck requests with that acks, their answers read as they come."""
        if acks is None:
            return super().latency_produce(port=leader_port(ports, dest), dest=dest, n=n, rate=rate, go=go)
        from twisted_broker.codec.kafka07.message_set import encode_message_set

        reader = _AckReader(_connect(leader_port(ports, dest)))
        go()
        started = time.perf_counter()
        for _ in paced(n, rate):
            message_set = encode_message_set([stamped_payload()])
            _send_all(reader.sock, produce_ack_request(acks, dest, message_set))
            reader.read()
        seconds = time.perf_counter() - started
        reader.sock.setblocking(True)
        reader.sock.settimeout(ACK_TIMEOUT_MS / 1000)
        while reader.answered < n:
            reader.read()
        reader.sock.close()
        return {"seconds": seconds}


class TwistedBrokerCommitted(TwistedBrokerReplicated):
    """Factor 1 with committed visibility (bench/tail.py's middle row): one broker and a
    ZooKeeper, each topic replicated on that broker alone, so a message is visible once
    appended (its high watermark) instead of once fsynced: the tail without the disk."""

    key = "twisted_broker_rf1"
    label = "twisted_broker rf=1 committed"
    factor = 1
    settings = {
        **TwistedBrokerReplicated.settings,
        "server": "one twistd -n broker process on 127.0.0.1 and one ZooKeeper; each topic: 1 partition "
                  "replicated on that broker alone (created by the topics tool, waited for until it has a leader)",
        "persistence": "a message is visible once committed: appended (the high watermark of a one-replica ISR); "
                       "fsync every 10,000 messages or 1 s: durability only, no figure waits for it",
    }

    def create(self, server: ReplicatedServer, dest: str) -> None:
        # A Metadata request creates a replicated topic only with a factor above 1 (below it
        # would be a 0.7 topic): the topics tool writes the assignment in ZooKeeper instead.
        subprocess.run([sys.executable, "-m", "twisted_broker", "topics", "--zk",
                        server.zookeeper.connect_string, "--create", "--topic", dest, "--partitions", "1",
                        "--replication-factor", "1"], check=True, stdout=subprocess.DEVNULL, timeout=60)
        super().create(server, dest)
