"""twisted_broker itself: ``twistd -n broker`` (bench/broker_process.py's BrokerProcess) and the
project's own clients, measured exactly like the peers.

The broker registers in a ZooKeeper of its own (Debian's, twisted_broker.local_zookeeper), as
a deployment would, so that the high-level consumer can find it; without Java or the
ZooKeeper package, or without the high-level consumer module, it runs without ZooKeeper and
that row is skipped with a note. One topic per test, one partition, logs under the run's
directory.

Flush policy and visibility. As in Kafka 0.7, a consumer sees a message only once a flush
(an fsync, in the broker's fsync process) has covered it. The policy here is
``log.flush.interval=1``: every append asks for a flush. One fsync per log is in flight at a
time and whatever arrives meanwhile waits for the next one (group commit), so the fsyncs
run back to back under load, each covering everything appended during the one before, and
at 5,000 messages/s a message waits one fsync (~0.2-0.3 ms here on a quiet disk) before it
is visible. A caught-up consumer waits in the broker, not in a sleep: with
``fetch.wait.max.ms`` the broker holds a fetch that finds nothing new and answers it when
the next flush publishes data (handlers/held_fetch.py), so the message reaches the consumer
right after its fsync. The producers' figures stop the clock when an Offsets request shows
every message flushed and visible: stricter than any peer's, which count a message once it
is in memory or written but not yet fsynced.

Rows: sync producer (SyncProducer) with 1 message per request and with 50-message sets,
50-message sets compressed with gzip, the async producer (Producer, producer.type=async,
batch.size 50, one message per send()), the SimpleConsumer (1 MiB fetches, every message
iterated), the high-level consumer (ZookeeperConsumerConnector, one stream, its defaults but
autooffset.reset=smallest), and fetch MB/s beside raw os.sendfile loopback (bench/loadgen.py,
the same client code against the broker and against a plain sendfile server over the same
segment files).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
import uuid

from bench.broker_process import BrokerProcess
from bench.peers.base import Go, Peer
from bench.peers.harness import ServerProcess, latency_ns, latency_summary, paced, payload_pool, poll_until, \
    stamped_payload

# The latency settings; the environment overrides them (workers inherit it), to tune them on
# another machine: BENCH_TB_FLUSH_MESSAGES, BENCH_TB_FLUSH_MS, BENCH_TB_FETCH_WAIT_MS,
# BENCH_TB_BACKOFF_MS, BENCH_TB_FLUSH_WORKER.
FLUSH_MESSAGES = int(os.environ.get("BENCH_TB_FLUSH_MESSAGES") or 1)  # log.flush.interval
FLUSH_MS = int(os.environ.get("BENCH_TB_FLUSH_MS") or 1000)  # log.default.flush.interval.ms, a backstop
FETCH_WAIT_MS = int(os.environ.get("BENCH_TB_FETCH_WAIT_MS") or 100)  # fetch.wait.max.ms
BACKOFF_MS = float(os.environ.get("BENCH_TB_BACKOFF_MS") or 0)  # a consumer's sleep after an empty fetch
FLUSH_WORKER = os.environ.get("BENCH_TB_FLUSH_WORKER") or "process"  # log.flush.worker
FETCH_BYTES = 1 << 20
ENTRY_BYTES = 4 + 6 + 200  # length field, magic-1 header, payload
SEND_BUFFER = 1 << 20

BROKER_SETTINGS = {
    "log.flush.interval": str(FLUSH_MESSAGES),
    "log.default.flush.interval.ms": str(FLUSH_MS),
    "log.default.flush.scheduler.interval.ms": str(FLUSH_MS),
    "log.flush.worker": FLUSH_WORKER,
    "fetch.wait.max.ms": str(FETCH_WAIT_MS),
    "socket.send.buffer": str(SEND_BUFFER), "socket.receive.buffer": str(SEND_BUFFER),
    "num.partitions": "1", "log.file.size": str(1 << 30),
}


def has_high_level_consumer() -> bool:
    return importlib.util.find_spec("twisted_broker.client.zookeeper_consumer") is not None


class TwistedBrokerServer(ServerProcess):
    """ZooKeeper (when the high-level consumer can be measured) and one broker."""

    name = "twisted_broker"

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.data_dir = os.path.join(directory, "logs")
        self.zookeeper = None
        self.note = ""
        self._broker: BrokerProcess | None = None

    def settings(self) -> dict[str, str]:
        """The broker's properties (bench/peers/tbroker_defaults.py's server has its own)."""
        return dict(BROKER_SETTINGS)

    def start(self) -> "TwistedBrokerServer":
        properties = self.settings()
        if not has_high_level_consumer():
            self.note = "twisted_broker.client.zookeeper_consumer is not there: no high-level consumer row"
        else:
            from twisted_broker.local_zookeeper import ZooKeeperServer
            try:
                self.zookeeper = ZooKeeperServer(os.path.join(self.directory, "zookeeper"))
                self.zookeeper.start()
                properties.update({"enable.zookeeper": "true", "zk.connect": self.zookeeper.connect_string})
            except (OSError, RuntimeError) as exc:
                self.zookeeper = None
                self.note = f"ZooKeeper did not start ({exc}): no high-level consumer row"
        # BrokerProcess keeps its log under <directory>/logs: our data_dir.
        self._broker = BrokerProcess(self.directory, properties)
        try:
            self._broker.start()
        except BaseException:
            self.stop()
            raise
        self.port = self._broker.port
        self.log_file = self._broker.log_file
        return self

    def stop(self) -> None:
        try:
            if self._broker is not None:
                self._broker.stop()
        finally:
            self._broker = None
            if self.zookeeper is not None:
                self.zookeeper.stop()
                self.zookeeper = None

    @property
    def pid(self) -> int | None:
        return self._broker.process.pid if self._broker and self._broker.process else None

    def segment_files(self, topic: str) -> list[str]:
        return self._broker.segment_files(topic)

    def log_tail(self) -> str:
        return self._broker.log_tail() if self._broker else ""

    def version(self) -> str:
        return checkout_version()


def checkout_version() -> str:
    """The project's version and the checkout's commit."""
    import twisted_broker
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(__file__)).stdout.strip()
    return f"{twisted_broker.__version__} ({commit})" if commit else twisted_broker.__version__


def end_offset(consumer, topic: str) -> int:
    from twisted_broker.client.simple_consumer import LATEST_TIME
    return consumer.get_offsets_before(topic, 0, LATEST_TIME, 1)[0]


class TwistedBroker(Peer):
    key = "twisted_broker"
    label = "twisted_broker"
    settings = {
        "server": "twistd -n broker, 127.0.0.1, 1 partition per topic, registered in a local ZooKeeper",
        "persistence": f"Kafka 0.7 log; log.flush.interval={FLUSH_MESSAGES}: each append asks for a flush "
                       f"(fsync, log.flush.worker={FLUSH_WORKER}), one in flight per log, the next covering all "
                       "that arrived meanwhile (group commit); a message is visible to consumers once "
                       "flushed",
        "broker properties": ", ".join(f"{key}={value}" for key, value in BROKER_SETTINGS.items()),
        "produce": "SyncProducer, 1 message per Produce request (b1) or 50-message sets (b50), no reply "
                   "(0.7 produce has none); done when Offsets shows all n flushed and visible",
        "consume": f"SimpleConsumer, {FETCH_BYTES >> 20} MiB fetches, every message iterated",
        "latency": f"SimpleConsumer fetch loop; the broker holds a caught-up fetch until the next flush "
                   f"(fetch.wait.max.ms={FETCH_WAIT_MS}), the consumer sleeps {BACKOFF_MS:g} ms after an "
                   "empty answer; SyncProducer, 1 message per request",
        "extra rows": "gzip: SyncProducer with gzip 50-message sets; async: Producer producer.type=async "
                      "batch.size=50, one send() per message; hl consumer: ZookeeperConsumerConnector, "
                      "one stream, autooffset.reset=smallest",
    }

    def make_server(self, directory: str) -> TwistedBrokerServer:
        return TwistedBrokerServer(directory)

    def client_options(self, server: TwistedBrokerServer) -> dict:
        zk = server.zookeeper.connect_string if server.zookeeper is not None else None
        return {"port": server.port, "zk": zk}

    # -- worker side -----------------------------------------------------------------------------

    def roles(self) -> dict:
        return {**super().roles(), "produce_async": self.produce_async, "consume_hl": self.consume_hl}

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, codec: str = "none", **_: object) -> dict:
        from twisted_broker.client.simple_consumer import SimpleConsumer
        from twisted_broker.client.sync_producer import SyncProducer
        from twisted_broker.codec.kafka07.compression import CODECS_BY_NAME
        from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set

        codec_id = CODECS_BY_NAME[codec]
        offsets = SimpleConsumer("127.0.0.1", port)
        start = end_offset(offsets, dest)
        producer = SyncProducer("127.0.0.1", port, buffer_size=SEND_BUFFER)
        pool = payload_pool()
        size = len(pool)
        go()
        started = time.perf_counter()
        send = producer.send
        sent_bytes = 0
        for first in range(0, n, batch):
            message_set = encode_compressed_message_set([pool[i % size] for i in range(first, min(first + batch, n))],
                                                        codec_id)
            send(dest, 0, message_set)
            sent_bytes += len(message_set)
        sent = time.perf_counter()
        expected = start + sent_bytes
        poll_until(lambda: end_offset(offsets, dest) >= expected, f"{dest}: offset {expected}", pause_s=0.0005)
        done = time.perf_counter()
        end = end_offset(offsets, dest)
        producer.close()
        offsets.close()
        if end != expected:
            raise RuntimeError(f"{dest}: end offset {end}, expected {expected}")
        return {"seconds": done - started, "sent_s": sent - started, "log_bytes": sent_bytes}

    def produce_async(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        from twisted_broker.client.producer import Producer
        from twisted_broker.client.simple_consumer import SimpleConsumer
        from twisted_broker.config import ProducerConfig

        offsets = SimpleConsumer("127.0.0.1", port)
        start = end_offset(offsets, dest)
        config = ProducerConfig(broker_list=f"0:127.0.0.1:{port}", producer_type="async", batch_size=50,
                                queue_enqueue_timeout_ms=-1, buffer_size=SEND_BUFFER)
        producer = Producer(config)
        pool = payload_pool()
        size = len(pool)
        go()
        started = time.perf_counter()
        send = producer.send
        for i in range(n):
            send(dest, [pool[i % size]])
        producer.close()  # sends what is still queued
        sent = time.perf_counter()
        expected = start + n * ENTRY_BYTES
        poll_until(lambda: end_offset(offsets, dest) >= expected, f"{dest}: offset {expected}", pause_s=0.0005)
        done = time.perf_counter()
        end = end_offset(offsets, dest)
        offsets.close()
        if end != expected:
            raise RuntimeError(f"{dest}: end offset {end}, expected {expected}")
        return {"seconds": done - started, "sent_s": sent - started}

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        from twisted_broker.client.simple_consumer import SimpleConsumer
        from twisted_broker.codec.kafka07.requests import FetchRequest

        consumer = SimpleConsumer("127.0.0.1", port, buffer_size=SEND_BUFFER)
        consumer.get_offsets_before(dest, 0, -2, 1)  # connected
        go()
        started = time.perf_counter()
        offset, got, payload_bytes = 0, 0, 0
        fetch = consumer.fetch
        while got < n:
            fetched = fetch(FetchRequest(dest, 0, offset, FETCH_BYTES))
            count = got
            for _offset, _next, message in fetched:
                payload_bytes += len(message.payload)
                got += 1
            if got == count:
                raise RuntimeError(f"{dest}: nothing at offset {offset} after {got} of {n} messages")
            offset = fetched.next_offset
        seconds = time.perf_counter() - started
        consumer.close()
        return {"seconds": seconds, "messages": got, "payload_bytes": payload_bytes}

    def consume_hl(self, *, port: int, dest: str, n: int, go: Go, zk: str | None = None, **_: object) -> dict:
        from twisted_broker.client.zookeeper_consumer import ZookeeperConsumerConnector
        from twisted_broker.config import ConsumerConfig

        if zk is None:
            raise RuntimeError("the broker runs without ZooKeeper")
        config = ConsumerConfig(groupid=f"bench-{dest}-{uuid.uuid4().hex[:8]}", zk_connect=zk,
                                autooffset_reset="smallest", fetch_size=FETCH_BYTES)
        connector = ZookeeperConsumerConnector(config)  # connects to ZooKeeper: set-up, not timed
        go()
        started = time.perf_counter()
        stream = connector.create_message_streams({dest: 1})[dest][0]
        subscribed = time.perf_counter()
        got, payload_bytes = 0, 0
        for message in stream:
            payload_bytes += len(message.payload)
            got += 1
            if got == n:
                break
        seconds = time.perf_counter() - started
        connector.shutdown()
        return {"seconds": seconds, "subscribe_s": subscribed - started, "payload_bytes": payload_bytes}

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, backoff_ms: float = BACKOFF_MS,
                        **_: object) -> dict:
        from twisted_broker.client.simple_consumer import SimpleConsumer
        from twisted_broker.codec.kafka07.requests import FetchRequest

        consumer = SimpleConsumer("127.0.0.1", port)
        consumer.get_offsets_before(dest, 0, -2, 1)
        go()
        samples: list[int] = []
        offset, empty = 0, 0
        backoff_s = backoff_ms / 1000
        deadline = time.monotonic() + 600
        while len(samples) < n:
            fetched = consumer.fetch(FetchRequest(dest, 0, offset, FETCH_BYTES))
            now = time.monotonic_ns()
            count = len(samples)
            samples.extend(latency_ns(message.payload, now) for _o, _n, message in fetched)
            if len(samples) == count:
                empty += 1
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{dest}: {count} of {n} messages")
                time.sleep(backoff_s)
            offset = fetched.next_offset
        consumer.close()
        return {**latency_summary(samples), "empty_fetches": empty}

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        from twisted_broker.client.sync_producer import SyncProducer
        from twisted_broker.codec.kafka07.message_set import encode_message_set

        producer = SyncProducer("127.0.0.1", port)
        go()
        started = time.perf_counter()
        for _ in paced(n, rate):
            producer.send(dest, 0, encode_message_set([stamped_payload()]))
        producer.close()
        return {"seconds": time.perf_counter() - started}
