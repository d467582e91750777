"""The nemesis run's clients, on threads in the root namespace (they reach every broker
whatever the nemesis cuts between nodes). Every value is unique; every attempt ends recorded
as acknowledged (with its partition and offset) or failed, or stays unknown (in flight at the end).

- ``IdempotentProducer``: confluent-kafka (librdkafka), acks=all, enable.idempotence, to topic
  ``IDEMPOTENT``; values ``i-p<partition>-<seq>``, the partition chosen in turn, so each
  partition's sequence numbers must appear in the log in increasing order, each once. A
  fatal error (librdkafka gives up its producer id) is recorded and a new producer made.
- ``AcksOneProducer``: kafka-python, acks=1, to ``ACKS_ONE`` (acks=1 may lose writes when a
  leader dies: counted, not a violation).
- ``Producer07``: the suite's 0.7 replicated-topic producer (tests/support/faults/traffic.py's
  ``LeaderProducer``: replication's ProduceAck request with acks=-1 on the 0.7 port, following
  leaders), one per partition of ``ZERO_SEVEN``.
- ``GroupMember``: confluent-kafka consumers in one group over both modern topics, and the
  suite's ``LeaderConsumer`` members over the 0.7 topic; every record seen is kept.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tests.support.faults.traffic import LeaderProducer, Leaders, group_of

IDEMPOTENT, ACKS_ONE, ZERO_SEVEN = "nem-idem", "nem-one", "nem-07"
PACE_07_S = 0.05
# librdkafka's log lines (a connection refused at every kill) go to clients.log, not the terminal
CLIENT_LOG = logging.getLogger("nemesis.clients")
CLIENT_LOG.propagate = False
# librdkafka's debug contexts for the idempotent producer (say "eos,msg"), to see why it drained
# or bumped its epoch; its debug lines go to clients.log too.
RDKAFKA_DEBUG = os.environ.get("NEMESIS_RDKAFKA_DEBUG", "")


def log_clients_to(path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    CLIENT_LOG.addHandler(handler)
    CLIENT_LOG.setLevel(logging.DEBUG if RDKAFKA_DEBUG else logging.INFO)
    for name in ("kafka",):  # kafka-python
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).propagate = False


class Acked:
    """What a producer knows: acknowledged (value -> (partition, offset)), failed values, sent."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.sent: list[bytes] = []
        self.fatal: list[str] = []
        self.at: dict[bytes, float] = {}  # value -> wall-clock time of its answer (evidence timelines)
        self._lock = threading.Lock()

    def report(self, value: bytes, partition: int | None, offset: int | None, error: str | None) -> None:
        with self._lock:
            self.at[value] = time.time()
            if error is None:
                self.acked[value] = (partition, offset)
            else:
                self.failed[value] = error


class _Thread(threading.Thread):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def stop(self, timeout_s: float = 60.0) -> None:
        self.stopping.set()
        self.join(timeout_s)


class IdempotentProducer(_Thread):
    def __init__(self, bootstrap: str, partitions: int, rate_per_s: float = 100.0) -> None:
        super().__init__("idempotent-producer")
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate_per_s
        self.history = Acked("acks=all idempotent (confluent-kafka)")
        self.unflushed = 0

    def _producer(self):
        from confluent_kafka import Producer
        return Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000, "request.timeout.ms": 10_000,
                         "topic.metadata.refresh.interval.ms": 1_000, "reconnect.backoff.max.ms": 500,
                         "error_cb": self._error, "logger": CLIENT_LOG,
                         **({"debug": RDKAFKA_DEBUG} if RDKAFKA_DEBUG else {})})

    def _error(self, error) -> None:
        if error.fatal():
            self.history.fatal.append(str(error))

    def _deliver(self, error, message) -> None:
        if error is None:
            self.history.report(message.value(), message.partition(), message.offset(), None)
        else:
            self.history.report(message.value(), None, None, str(error))

    def run(self) -> None:
        producer, seq, fatal_seen = self._producer(), 0, 0
        while not self.stopping.is_set():
            if len(self.history.fatal) > fatal_seen:  # librdkafka gave up its producer id: a new producer
                fatal_seen = len(self.history.fatal)
                producer.flush(5)
                producer = self._producer()
            partition = seq % self.partitions
            value = f"i-p{partition}-{seq // self.partitions:08d}".encode()
            try:
                producer.produce(IDEMPOTENT, value=value, partition=partition, on_delivery=self._deliver)
            except BufferError:
                producer.poll(0.1)
                continue
            except Exception as e:  # a fatal state refuses new records: made anew above
                self.errors.append(repr(e))
                producer.poll(0.1)
                continue
            self.history.sent.append(value)
            seq += 1
            producer.poll(1 / self.rate)
        self.unflushed = producer.flush(60)


class AcksOneProducer(_Thread):
    def __init__(self, bootstrap: str, partitions: int, rate_per_s: float = 50.0) -> None:
        super().__init__("acks-one-producer")
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate_per_s
        self.history = Acked("acks=1 (kafka-python)")

    def run(self) -> None:
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1, linger_ms=5, retries=3,
                                 request_timeout_ms=10_000, max_block_ms=2_000, metadata_max_age_ms=2_000,
                                 reconnect_backoff_max_ms=500)
        seq = 0
        try:
            while not self.stopping.is_set():
                partition = seq % self.partitions
                value = f"o-p{partition}-{seq // self.partitions:08d}".encode()
                seq += 1
                try:
                    future = producer.send(ACKS_ONE, value=value, partition=partition)
                except Exception as e:  # no metadata within max_block_ms: a failed attempt
                    self.history.report(value, None, None, repr(e))
                    continue
                self.history.sent.append(value)
                future.add_callback(lambda m, v=value: self.history.report(v, m.partition, m.offset, None))
                future.add_errback(lambda e, v=value: self.history.report(v, None, None, repr(e)))
                time.sleep(1 / self.rate)
            producer.flush(30)
        except Exception as e:
            self.errors.append(repr(e))
        finally:
            producer.close(10)


class Producer07(LeaderProducer):
    """LeaderProducer at a gentler pace (the machine has two cores for eight servers)."""

    def _payloads(self) -> list[bytes]:
        time.sleep(PACE_07_S)
        return super()._payloads()


def producers_07(addresses: list[tuple[str, int]], partitions: int) -> list[Producer07]:
    leaders = Leaders(lambda: addresses, ZERO_SEVEN)
    return [Producer07(leaders, p, tag="z", timeout_ms=4000) for p in range(partitions)]


def consumers_07(addresses: list[tuple[str, int]], partitions: int, members: int = 2):
    return group_of(Leaders(lambda: addresses, ZERO_SEVEN), list(range(partitions)), members)


class GroupMember(_Thread):
    """A confluent-kafka consumer of a group over both modern topics; ``seen``: (topic, p) -> [(offset, value)]."""

    def __init__(self, bootstrap: str, group: str, index: int) -> None:
        super().__init__(f"group-member-{index}")
        self.bootstrap, self.group = bootstrap, group
        self.seen: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        self.positions: dict[tuple[str, int], int] = {}

    def run(self) -> None:
        from confluent_kafka import Consumer
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True,
                             "auto.commit.interval.ms": 1000, "session.timeout.ms": 10_000,
                             "heartbeat.interval.ms": 1_000, "topic.metadata.refresh.interval.ms": 2_000,
                             "reconnect.backoff.max.ms": 500, "logger": CLIENT_LOG})
        consumer.subscribe([IDEMPOTENT, ACKS_ONE])
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(200, 0.5):
                    if message.error() is not None:
                        if len(self.errors) < 1000:
                            self.errors.append(str(message.error()))
                        continue
                    key = (message.topic(), message.partition())
                    self.seen.setdefault(key, []).append((message.offset(), message.value()))
                    self.positions[key] = message.offset() + 1
        finally:
            consumer.close()
