"""The scale benchmark's clients (bench/scale.py): confluent-kafka (librdkafka) against the
brokers' modern listeners, as a user's program would drive them.

- ``CreateTopics``: one AdminClient.create_topics call with every topic (librdkafka sends
  them in one CreateTopics request, to the controller), watched without blocking so that the
  bench can poll ZooKeeper meanwhile.
- ``produce_one_each``: one acks=all record to every partition, re-sent after a failed
  delivery until the bound; the time of each partition's first acknowledgement.
- ``consume_all``: a consumer assigned every partition from its beginning, until it holds
  ``expected`` records of each (or the bound).
- ``time_metadata``: one Metadata request for every topic, timed (what each client's first
  step, and its every leader change, waits for).

Every call is bounded: it returns what it saw at its deadline instead of raising.
"""

from __future__ import annotations

import time
from collections import Counter

RECORD = b"x" * 100


class CreateTopics:
    """AdminClient.create_topics of ``names`` (each ``partitions`` x ``factor``), sent now."""

    def __init__(self, bootstrap: str, names: list[str], partitions: int, factor: int, *,
                 request_timeout_s: float, operation_timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        self.request_timeout_s, self.operation_timeout_s = request_timeout_s, operation_timeout_s
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self.started = time.monotonic()
        self._futures = self._admin.create_topics(
            [NewTopic(name, partitions, factor) for name in names],
            request_timeout=request_timeout_s, operation_timeout=operation_timeout_s)
        self.answered_s: float | None = None

    def done(self) -> bool:
        if self.answered_s is None and all(f.done() for f in self._futures.values()):
            self.answered_s = time.monotonic() - self.started
        return self.answered_s is not None

    def outcome(self) -> dict:
        """The answer's time and its per-topic errors by name (a client-side timeout is
        ``_TIMED_OUT`` for every topic); call after ``done()``, or at the bound."""
        errors: Counter = Counter()
        for future in self._futures.values():
            if not future.done():
                errors["not answered"] += 1
                continue
            try:
                future.result()
            except Exception as exc:  # KafkaException carries a KafkaError
                error = exc.args[0] if exc.args else exc
                errors[getattr(error, "name", lambda: repr(error))()] += 1
        timed_out = errors.get("_TIMED_OUT", 0) > 0 or errors.get("not answered", 0) > 0
        return {"answered_s": None if timed_out else _round(self.answered_s),
                "answered_within_timeout": self.answered_s is not None and not timed_out,
                "client_gave_up_s": _round(self.answered_s) if timed_out else None,
                "request_timeout_s": self.request_timeout_s, "operation_timeout_s": self.operation_timeout_s,
                "topic_errors": dict(errors)}


def produce_one_each(bootstrap: str, partitions: list[tuple[str, int]], bound_s: float,
                     since: float | None = None) -> dict:
    """One acks=all record to each partition; {"all_acked_s", "acked", "of", ...}, times
    counted from ``since`` (a monotonic time; now by default). ``acked_by_second`` counts
    the acknowledgements by whole second; ``_ack_s`` (for the caller, not the report) is
    each partition's time."""
    from confluent_kafka import KafkaException, Producer
    since = time.monotonic() if since is None else since
    started = time.monotonic()
    deadline = started + bound_s
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": max(int(bound_s * 1000), 1000),
                         "topic.metadata.refresh.interval.ms": 5000})
    acked: dict[tuple[str, int], float] = {}
    failed: list[tuple[str, int]] = []
    errors: Counter = Counter()

    def delivered(error, message):
        key = (message.topic(), message.partition())
        if error is None:
            acked.setdefault(key, time.monotonic())
        else:
            errors[error.name()] += 1
            failed.append(key)

    refused: dict[tuple[str, int], float] = {}  # refused by produce() itself: when to try again

    def send(key):
        try:
            producer.produce(key[0], RECORD, partition=key[1], on_delivery=delivered)
        except BufferError:
            failed.append(key)
        except KafkaException as exc:  # e.g. _UNKNOWN_PARTITION: the topic is not (yet) what we asked for
            errors[f"produce() {exc.args[0].name()}"] += 1
            refused[key] = time.monotonic() + 1.0

    for key in partitions:
        send(key)
        producer.poll(0)
    while len(acked) < len(partitions) and time.monotonic() < deadline:
        producer.poll(0.05)
        now = time.monotonic()
        retry, failed[:] = list(failed), []
        retry += [key for key, when in refused.items() if when <= now]
        for key in retry:
            refused.pop(key, None)
            if key not in acked:
                send(key)
    producer.purge()
    producer.flush(1)
    times = sorted(acked.values())
    return {"all_acked_s": _round(times[-1] - since) if len(acked) == len(partitions) else None,
            "acked": len(acked), "of": len(partitions), "bound_s": bound_s,
            "half_acked_s": _round(times[len(partitions) // 2 - 1] - since) if len(times) >= len(partitions) // 2 else None,
            "first_acked_s": _round(times[0] - since) if times else None, "delivery_errors": dict(errors),
            "acked_by_second": sorted(Counter(int(t - since) for t in times).items()),
            "_ack_s": {key: t - since for key, t in acked.items()}}


def consume_all(bootstrap: str, partitions: list[tuple[str, int]], expected: int, bound_s: float) -> dict:
    """Read every partition from its beginning until each gave ``expected`` records."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench", "enable.auto.commit": False,
                         "enable.partition.eof": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
    counts: Counter = Counter()
    errors: Counter = Counter()
    done_at = None
    try:
        while time.monotonic() - started < bound_s:
            for message in consumer.consume(num_messages=1000, timeout=0.2):
                if message.error():
                    errors[message.error().name()] += 1
                else:
                    counts[(message.topic(), message.partition())] += 1
            if sum(1 for key in partitions if counts[key] >= expected) == len(partitions):
                done_at = time.monotonic() - started
                break
    finally:
        consumer.close()
    return {"all_consumed_s": _round(done_at), "partitions_complete": sum(1 for k in partitions if counts[k] >= expected),
            "records": sum(counts.values()), "of": len(partitions) * expected, "bound_s": bound_s,
            "errors": dict(errors)}


def time_metadata(port: int, topics: list[str], timeout_s: float = 30.0) -> dict:
    """How long a Metadata v1 request for ``topics`` takes at a modern listener, and how
    many partitions its answer gives a leader (tests/support's frames: no client library)."""
    from tests.support.kafka_clients.kafka_frames import Connection, decode_metadata_v1, metadata_v1
    started = time.monotonic()
    try:
        with Connection(port, timeout_s) as connection:
            answer = decode_metadata_v1(connection.request(metadata_v1(1, topics)))
    except (OSError, ConnectionError) as exc:  # socket.timeout is an OSError
        return {"s": None, "error": repr(exc)[:120], "timeout_s": timeout_s}
    led = sum(1 for _error, partitions in answer["topics"].values() for p in partitions.values() if p[1] >= 0)
    return {"s": _round(time.monotonic() - started), "partitions_led": led}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
