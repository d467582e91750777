"""Today's Kafka clients through the modern listener, beside the 0.7 path on the same workload.

Workload: ``n`` 200-byte messages (bench/paper.py's seeded payloads, n=200,000 by default) to
one partition of one ``twistd -n broker`` with bench/paper.py's twisted_broker settings
(bench/peers/tbroker.py: each append asks for a flush, group commit) and ``kafka.port`` on a
free loopback port, without ZooKeeper. Everything runs in this process, one client at a time;
each round visits every row, and each figure is the median of the rounds.

- 0.7 path: bench/paper.py's twisted_broker roles, called as they are (``TwistedBroker.produce``
  with 50-message sets, timed until an Offsets request shows all ``n`` flushed and visible; 0.7
  produce has no acknowledgement, so the same row stands beside acks=1 and acks=all), and
  ``TwistedBroker.consume`` (SimpleConsumer, 1 MiB fetches, every message iterated).
- confluent-kafka and kafka-python produce batched (linger 5 ms, their default batch sizes,
  no compression) with acks=1 and with acks=all (one broker: the in-sync set is the leader),
  timed from the first send until flush() has every acknowledgement; then they consume the
  acks=1 topic's backlog from offset 0 to the end, each value touched.

``ratio`` = the modern client's messages/s / the 0.7 path's; the issue's target is >= 0.7x.
``broker CPU us/msg`` is the broker process's CPU time (/proc, 10 ms ticks) over the row,
per message: it separates the broker's cost from the client's (kafka-python is bound by its
own CPU; confluent-kafka's produce by the broker's).
Run it with ``python -m bench modern`` (BENCH_MODERN_N, BENCH_MODERN_ROUNDS).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

from bench.broker_process import BrokerProcess
from bench.peers.harness import payload_pool
from bench.peers.tbroker import BROKER_SETTINGS, TwistedBroker

LINGER_MS = 5
NEEDED_API_KEYS = {0, 1, 2, 3}  # Produce, Fetch, ListOffsets, Metadata
TARGET = 0.7
TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _served_api_keys(port: int) -> set[int]:
    """The API keys the listener's ApiVersions v0 answer lists (empty if it does not answer)."""
    request = struct.pack(">hhih", 18, 0, 1, -1)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            answer = b""
            while len(answer) < 4 or len(answer) < 4 + int.from_bytes(answer[:4], "big"):
                chunk = sock.recv(65536)
                if not chunk:
                    return set()
                answer += chunk
    except OSError:
        return set()
    _correlation_id, error, count = struct.unpack_from(">ihi", answer, 4)
    return set() if error else {struct.unpack_from(">h", answer, 14 + 6 * i)[0] for i in range(count)}


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _topic(row: str, number: int) -> str:
    """The topic a row writes in round ``number`` (Kafka's topic-name characters only)."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in row) + f"-{number}"


def _values(n: int) -> list[bytes]:
    pool = payload_pool()
    return [pool[i % len(pool)] for i in range(n)]


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], acks: str) -> float:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": LINGER_MS,
                         "queue.buffering.max.messages": len(values) + 1000})
    failures = []

    def report(error, _message):
        if error is not None:
            failures.append(error)

    producer.list_topics(topic, timeout=30)  # connected and the topic known before the clock
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for value in values:
        produce(topic, value, partition=0, on_delivery=report)
        poll(0)
    left = producer.flush(TIMEOUT_S)
    seconds = time.perf_counter() - started
    if left or failures:
        raise RuntimeError(f"confluent-kafka: {left} not delivered, failures {failures[:3]}")
    return seconds


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes], acks: int | str) -> float:
    from kafka import KafkaProducer
    # not idempotent, as confluent-kafka's default (kafka-python 3 turns it on by itself)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=LINGER_MS, enable_idempotence=False)
    producer.partitions_for(topic)  # connected and the topic known before the clock
    send = producer.send
    started = time.perf_counter()
    futures = [send(topic, value, partition=0) for value in values]
    producer.flush(TIMEOUT_S)
    seconds = time.perf_counter() - started
    failed = sum(1 for future in futures if future.failed())
    producer.close()
    if failed:
        raise RuntimeError(f"kafka-python: {failed} sends failed, e.g. {next(f.exception for f in futures if f.failed())!r}")
    return seconds


def confluent_consume(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False})
    consumer.list_topics(topic, timeout=30)
    return consume_from_start(consumer, topic, n)


def consume_from_start(consumer, topic: str, n: int, timeout_s: float = TIMEOUT_S) -> float:
    """Seconds for a confluent-kafka ``consumer`` (connected, then closed here) to read ``n``
    records of partition 0 from offset 0, each value touched."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = payload_bytes = 0
    started = time.perf_counter()
    while got < n:
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"confluent-kafka consumed {got} of {n}")
        for message in consumer.consume(10_000, 1.0):
            if message.error() is not None:
                raise RuntimeError(message.error())
            payload_bytes += len(message.value())
            got += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def kafka_python_consume(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000,
                             fetch_max_bytes=4 << 20, max_partition_fetch_bytes=4 << 20)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = payload_bytes = 0
    started = time.perf_counter()
    while got < n:
        if time.perf_counter() - started > TIMEOUT_S:
            raise TimeoutError(f"kafka-python consumed {got} of {n}")
        for messages in consumer.poll(1000).values():
            for message in messages:
                payload_bytes += len(message.value)
                got += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def run(n: int | None = None, rounds: int | None = None) -> dict:
    """Run the rows ``rounds`` times, print the table, return the figures (messages/s)."""
    n = n or int(os.environ.get("BENCH_MODERN_N") or 200_000)
    rounds = rounds or int(os.environ.get("BENCH_MODERN_ROUNDS") or 3)
    directory = tempfile.mkdtemp(prefix="tb-modern-bench-", dir=os.environ.get("BENCH_DIR"))
    kafka_port = _free_port()
    broker = BrokerProcess(directory, {**BROKER_SETTINGS, "kafka.port": str(kafka_port)})
    bootstrap = f"127.0.0.1:{kafka_port}"
    old = TwistedBroker()
    values = _values(n)
    seconds: dict[str, list[float]] = {}
    broker_cpu: dict[str, list[float]] = {}  # the broker process's CPU seconds per row
    try:
        broker.start()
        missing = NEEDED_API_KEYS - _served_api_keys(kafka_port)

        def timed(name: str, call) -> None:
            cpu_before = _cpu_s(broker.process.pid)
            seconds.setdefault(name, []).append(call())
            broker_cpu.setdefault(name, []).append(_cpu_s(broker.process.pid) - cpu_before)

        for number in range(rounds):
            old_topic = _topic("0.7", number)
            timed("0.7 produce", lambda: old.produce(port=broker.port, dest=old_topic, n=n, batch=50,
                                                     go=lambda: None)["seconds"])
            timed("0.7 consume", lambda: old.consume(port=broker.port, dest=old_topic, n=n,
                                                     go=lambda: None)["seconds"])
            if missing:
                continue
            for acks in ("1", "all"):
                confluent_topic, python_topic = _topic(f"confluent-{acks}", number), _topic(f"python-{acks}", number)
                timed(f"confluent-kafka produce acks={acks}",
                      lambda: confluent_produce(bootstrap, confluent_topic, values, acks))
                timed(f"kafka-python produce acks={acks}",
                      lambda: kafka_python_produce(bootstrap, python_topic, values, 1 if acks == "1" else "all"))
            timed("confluent-kafka consume", lambda: confluent_consume(bootstrap, _topic("confluent-1", number), n))
            timed("kafka-python consume", lambda: kafka_python_consume(bootstrap, _topic("python-1", number), n))
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)

    rate = {name: n / statistics.median(values_s) for name, values_s in seconds.items()}
    cpu_us = {name: statistics.median(values_s) / n * 1e6 for name, values_s in broker_cpu.items()}
    rows = [(name, "0.7 produce") for name in rate if "produce acks" in name]
    rows += [(name, "0.7 consume") for name in rate if name.endswith(" consume") and not name.startswith("0.7")]
    load = os.getloadavg()
    if missing:
        print(f"\nmodern: the listener on kafka.port does not serve API keys {sorted(missing)} yet: no "
              f"modern rows; 0.7 path produce {rate['0.7 produce']:,.0f} msgs/s, consume "
              f"{rate['0.7 consume']:,.0f} msgs/s")
        return {"n": n, "rounds": rounds, "seconds": seconds, "missing_api_keys": sorted(missing)}
    print(f"\nmodern: {n:,} messages of 200 bytes, one partition, median of {rounds} rounds; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':34} {'msgs/s':>10} {'0.7 path msgs/s':>16} {'ratio':>7} {'broker CPU us/msg':>18} {'(0.7 path)':>10}")
    results: dict = {"n": n, "rounds": rounds, "seconds": seconds, "broker_cpu_s": broker_cpu, "rows": {}}
    for name, baseline in rows:
        ratio = rate[name] / rate[baseline]
        print(f"{name:34} {rate[name]:10,.0f} {rate[baseline]:16,.0f} {ratio:6.2f}x "
              f"{cpu_us[name]:18.2f} {cpu_us[baseline]:10.2f}")
        results["rows"][name] = {"msgs_per_s": rate[name], "baseline": baseline, "baseline_msgs_per_s": rate[baseline],
                                 "ratio": ratio, "broker_cpu_us_per_msg": cpu_us[name],
                                 "baseline_broker_cpu_us_per_msg": cpu_us[baseline]}
    worst = min(row["ratio"] for row in results["rows"].values())
    results["target"] = {"ratio": TARGET, "worst": worst, "met": worst >= TARGET}
    print(f"0.7 path: bench/paper.py's twisted_broker roles (produce: 50-message sets until visible; consume: "
          f"SimpleConsumer). Broker CPU per message tells the broker's cost from the client's (kafka-python's "
          f"rows are bound by its own CPU). Target >= {TARGET}x: {'met' if worst >= TARGET else 'NOT met'} "
          f"({worst:.2f}x at worst)")
    return results


if __name__ == "__main__":
    run()
