"""twisted_broker with make run's defaults, for bench/tail.py's two rows of issue 24's target
"with make run's defaults, end-to-end p99 at 5,000 msg/s <= 10 ms for both protocols".

Server: one ``twistd -n broker`` (and a ZooKeeper, as tbroker.py's) whose flush and fetch
settings are etc/server.properties' own, read from the file: an fsync every 10,000 messages or
1 s, except that a flush a waiting consumer needs starts at once, and a 0.7 fetch at the log end
held up to ``fetch.wait.max.ms`` (0 there: 0.7's behaviour). Its modern listener (``kafka.port``) is on a free port.

Rows:
- ``twisted_broker_defaults``: the 0.7 clients of tbroker.py's latency test (SyncProducer, one
  message per request; SimpleConsumer's fetch loop, 1 ms after an empty answer: etc/server.properties
  leaves ``fetch.wait.max.ms`` at 0, so nothing is held and the consumer polls).
- ``twisted_broker_defaults_modern``: confluent-kafka as a user of today's clients runs it,
  librdkafka's defaults (acks=all, linger.ms 5, fetch.wait.max.ms 500): a producer calling
  ``produce`` once per stamped message at the test's rate, a consumer assigned to the
  partition from its start, polling.
Messages are visible only once fsynced in both (a single-replica 0.7 topic).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from bench.peers.base import Go
from bench.peers.harness import MESSAGE_BYTES, latency_ns, latency_summary, paced, stamped_payload
from bench.peers.tbroker import TwistedBroker, TwistedBrokerServer
from twisted_broker.properties import read_properties

SERVER_PROPERTIES = Path(__file__).resolve().parents[2] / "etc" / "server.properties"
# What sets when a message becomes visible and how a fetch waits; the rest (ports, ZooKeeper,
# log.dir) is the bench's own.
POLICY_KEYS = ("log.flush.interval", "log.default.flush.interval.ms", "log.default.flush.scheduler.interval.ms",
               "fetch.wait.max.ms", "log.file.size", "num.partitions", "socket.send.buffer",
               "socket.receive.buffer")
POLL_BACKOFF_MS = 1.0  # the 0.7 consumer's sleep after an empty fetch


def make_run_settings() -> dict[str, str]:
    """etc/server.properties' flush and fetch settings (a key it does not set keeps the broker's default)."""
    properties = read_properties(SERVER_PROPERTIES)
    return {key: properties[key] for key in POLICY_KEYS if key in properties}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DefaultsServer(TwistedBrokerServer):
    name = "twisted_broker_defaults"
    modern_port = 0

    def settings(self) -> dict[str, str]:
        self.modern_port = _free_port()
        return {**make_run_settings(), "kafka.port": str(self.modern_port)}


class TwistedBrokerDefaults(TwistedBroker):
    key = "twisted_broker_defaults"
    label = "twisted_broker, make run's defaults (0.7 clients)"
    settings = {"server": "twistd -n broker with etc/server.properties' flush and fetch settings "
                          f"({', '.join(POLICY_KEYS)}), read from the file",
                "latency": "tbroker.py's 0.7 clients: SyncProducer, 1 message per request; SimpleConsumer fetch loop"}

    def make_server(self, directory: str) -> DefaultsServer:
        return DefaultsServer(directory)

    def client_options(self, server: DefaultsServer) -> dict:
        # fetch.wait.max.ms is 0 there (0.7's own behaviour): the 0.7 consumer polls, 1 ms apart.
        return {**super().client_options(server), "modern_port": server.modern_port, "backoff_ms": POLL_BACKOFF_MS}


class TwistedBrokerDefaultsModern(TwistedBrokerDefaults):
    key = "twisted_broker_defaults_modern"
    label = "twisted_broker, make run's defaults (confluent-kafka)"
    settings = {**TwistedBrokerDefaults.settings,
                "latency": "confluent-kafka with librdkafka's defaults: produce() per message at the rate, "
                           "a consumer assigned from the partition's start, poll()"}

    def create(self, server: DefaultsServer, dest: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.modern_port}"})
        admin.create_topics([NewTopic(dest, 1, 1)])[dest].result(30)

    def roles(self) -> dict:
        return {"latency_consume": self.latency_consume, "latency_produce": self.latency_produce}

    def latency_consume(self, *, modern_port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{modern_port}", "group.id": f"tail-{dest}",
                             "enable.auto.commit": False})
        # From the start of a new topic: no message can be missed, however late the first fetch.
        consumer.assign([TopicPartition(dest, 0, OFFSET_BEGINNING)])
        consumer.poll(1.0)  # connected and fetching before the clock (nothing is there yet)
        go()
        samples: list[int] = []
        deadline = time.monotonic() + 600
        while len(samples) < n:
            message = consumer.poll(0.1)
            if message is None or message.error():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{dest}: {len(samples)} of {n} messages")
                continue
            now = time.monotonic_ns()
            if len(message.value()) == MESSAGE_BYTES:
                samples.append(latency_ns(message.value(), now))
        consumer.close()
        return latency_summary(samples)

    def latency_produce(self, *, modern_port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": f"127.0.0.1:{modern_port}"})
        producer.list_topics(dest, timeout=30)  # connected, and the partition's leader known
        go()
        started = time.perf_counter()
        for _ in paced(n, rate):
            producer.produce(dest, stamped_payload())
            producer.poll(0)
        if producer.flush(60):
            raise TimeoutError(f"{dest}: {len(producer)} messages not acknowledged")
        return {"seconds": time.perf_counter() - started}
