"""What authentication and the ACL authorizer cost today's Kafka clients (issue 25's bench).

Set-up: one ZooKeeper (twisted_broker.local_zookeeper) and two ``twistd -n broker`` processes
(bench/broker_process.py with bench/peers/tbroker.py's settings, as bench/modern.py), each in a
ZooKeeper chroot of its own, each with the same three listeners of today's clients: PLAINTEXT,
SASL_PLAINTEXT and SASL_SSL (TLS from a trustme CA; SASL_SSL asks no client certificate).
SCRAM-SHA-256 users (4096 iterations) made in each chroot by the real command, ``twisted-broker
users --add``: ``bench`` (the measured clients), ``admin`` (creates the topics; the super user
of "on") and ``intruder`` (no ACL).

- **off**: no ``authorizer.class.name``: the handlers' table is not wrapped at all.
- **on**: ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``,
  ``super.users=User:admin``, and 1,000 ACLs in its chroot, written before it starts through
  registry/acl_view.py (the store ``twisted-broker acls`` writes): ``User:bench``'s Write on its
  topic and 999 others (``thousand_acls``), some on that topic or a prefix covering it for other
  principals, most on other topics, prefixes and groups.

Rows; in each round every side is measured once, the order flipped from one round to the next
(A B, B A, ...), so drift and other engineers' load fall on both sides; figures are medians of
the rounds. Every client connects (TLS handshake, SCRAM exchange, the topic's metadata) before
its clock starts; values are bench/paper.py's seeded 200-byte payloads.

1. **listener** (broker "off", confluent-kafka): PLAINTEXT (``User:ANONYMOUS``) beside SASL_SSL
   (SCRAM-SHA-256, ``User:bench``). Produce ``n`` records batched (linger 5 ms, acks=1, one
   partition), timed from the first ``produce()`` until ``flush()`` has every acknowledgement;
   then consume that backlog from offset 0 (assigned, no group, ``fetch.queue.backoff.ms=10``:
   ``consume_backlog`` says why), every value touched.
   ``ratio`` = SASL_SSL / PLAINTEXT.
2. **authorizer** (produce b1): ``b1`` records, one per request, synchronous (each
   ``produce()`` followed by ``flush()``, which returns once its acknowledgement is in), as
   ``User:bench`` over SASL_PLAINTEXT with SCRAM-SHA-256, to "off" and to "on". acks=1: acks=all
   waits for the flush (an fsync here), whose time varies with the disk and would hide the
   authorizer in noise; SASL_PLAINTEXT, not SASL_SSL, for the same reason (TLS's constant cost
   on both sides would only shrink the difference). ``ratio`` = on / off; issue 25's target:
   at least 0.9 (within 10%).

Before the clocks: "on" must answer DescribeAcls with the 1,000 ACLs (as ``admin``) and refuse
``intruder``'s produce with TOPIC_AUTHORIZATION_FAILED, so the authorizer is known to be
deciding. ``broker CPU us/record`` is the broker process's CPU time (/proc, 10 ms ticks) over
a row, per record: the broker's own cost, apart from the client's and the machine's noise.

Output: a table, and ``bench/results/security-<UTC date>.md`` and ``.json`` (a second run on
the same day replaces the first), with the load average before and after.
Run it with ``python -m bench security`` or ``python -m bench.security`` (``--help``; also
BENCH_SECURITY_N, BENCH_SECURITY_B1, BENCH_SECURITY_ROUNDS).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.modern import _cpu_s as cpu_s
from bench.modern import consume_from_start
from bench.paper import machine
from bench.peers.harness import payload_pool
from bench.security_setup import (
    ACLS, AUTHORIZER, B1_TOPIC, TIMEOUT_S, SecureBroker, add_users, check_authorizer, create_topics,
    make_certificates, thousand_acls, wait_for_leader, write_acls,
)
from twisted_broker.local_zookeeper import ZooKeeperServer

DEFAULT_N = 600_000  # records per batched produce / consume row (about 2 s and 1 s here)
DEFAULT_B1 = 4_000  # records per produce b1 row (about 2.5 s here)
DEFAULT_ROUNDS = 7  # one round's b1 on / off varies by +-15% here; the median of 7 holds steadier
RESULTS = Path(__file__).with_name("results")
LINGER_MS = 5
FETCH_QUEUE_BACKOFF_MS = 10  # consume_backlog says why
TARGET = 0.9  # authorizer on / off, produce b1



def produce_batched(config: dict[str, str], topic: str, values: list[bytes]) -> float:
    """Seconds from the first produce() until flush() has every acknowledgement."""
    from confluent_kafka import Producer
    producer = Producer({**config, "acks": "1", "linger.ms": LINGER_MS,
                         "queue.buffering.max.messages": len(values) + 1000})
    failures = []

    def report(error, _message):
        if error is not None:
            failures.append(error)

    wait_for_leader(producer, topic)  # connected, logged in and the topic known before the clock
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for value in values:
        produce(topic, value, partition=0, on_delivery=report)
        poll(0)
    left = producer.flush(TIMEOUT_S)
    seconds = time.perf_counter() - started
    if left or failures:
        raise RuntimeError(f"{left} not delivered, failures {failures[:3]}")
    return seconds


def consume_backlog(config: dict[str, str], topic: str, n: int) -> float:
    """Seconds to read ``n`` records from offset 0, each value touched."""
    from confluent_kafka import Consumer, TopicPartition
    # fetch.queue.backoff.ms: librdkafka stops fetching once its queue holds queued.min.messages
    # (100,000) and looks again only after this long (1 s by default): a faster listener fills
    # the queue sooner and stalled a whole second (PLAINTEXT 1.75 s for 600,000 records, 0.8 s
    # at 10 ms), which measured the client's pause, not the listener.
    consumer = Consumer({**config, "group.id": "bench-unused", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    deadline = time.monotonic() + TIMEOUT_S
    while consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1] < n:
        if time.monotonic() > deadline:  # connected, and the whole backlog visible, before the clock
            raise TimeoutError(f"{topic}: fewer than {n} records visible")
        time.sleep(0.05)
    return consume_from_start(consumer, topic, n, TIMEOUT_S)


def produce_b1(config: dict[str, str], topic: str, values: list[bytes]) -> tuple[float, float]:
    """(seconds, median latency in ms): one record per request, each acknowledged before the next."""
    from confluent_kafka import Producer
    producer = Producer({**config, "acks": "1", "linger.ms": 0, "socket.nagle.disable": True})
    failures = []

    def report(error, _message):
        if error is not None:
            failures.append(error)

    wait_for_leader(producer, topic)
    produce, flush, clock = producer.produce, producer.flush, time.perf_counter
    latencies = []
    started = clock()
    for value in values:
        sent = clock()
        produce(topic, value, partition=0, on_delivery=report)
        if flush(TIMEOUT_S):
            raise RuntimeError("a record was not acknowledged in time")
        latencies.append(clock() - sent)
    seconds = clock() - started
    if failures:
        raise RuntimeError(f"failures {failures[:3]}")
    return seconds, statistics.median(latencies) * 1e3


# -- the run -----------------------------------------------------------------------------------

def run(n: int | None = None, b1: int | None = None, rounds: int | None = None, *,
        output: Path | None = RESULTS) -> dict:
    """Start the set-up, measure every row ``rounds`` times, print the table, write the
    results under ``output`` (None: write nothing); return the figures."""
    n = n or int(os.environ.get("BENCH_SECURITY_N") or DEFAULT_N)
    b1 = b1 or int(os.environ.get("BENCH_SECURITY_B1") or DEFAULT_B1)
    rounds = rounds or int(os.environ.get("BENCH_SECURITY_ROUNDS") or DEFAULT_ROUNDS)
    pool = payload_pool()
    values = [pool[i % len(pool)] for i in range(n)]
    b1_values = values[:b1] if b1 <= n else [pool[i % len(pool)] for i in range(b1)]
    directory = Path(tempfile.mkdtemp(prefix="tb-security-bench-", dir=os.environ.get("BENCH_DIR")))
    zookeeper = ZooKeeperServer(directory / "zookeeper", tick_time_ms=2000)
    brokers: dict[str, SecureBroker] = {}
    seconds: dict[str, list[float]] = {}
    broker_cpu: dict[str, list[float]] = {}
    b1_latency_ms: dict[str, list[float]] = {}
    load_start, started = os.getloadavg(), time.monotonic()
    try:
        zookeeper.start()
        from kazoo.client import KazooClient
        root = KazooClient(hosts=zookeeper.connect_string)
        root.start(30)
        for side in ("off", "on"):
            root.ensure_path(f"/{side}")
        root.stop()
        root.close()
        chroots = {side: f"{zookeeper.connect_string}/{side}" for side in ("off", "on")}
        for chroot in chroots.values():
            add_users(chroot)
        write_acls(chroots["on"], thousand_acls("User:bench", B1_TOPIC))
        certificates = make_certificates(directory)
        brokers["off"] = SecureBroker(directory / "off", chroots["off"], certificates)
        brokers["on"] = SecureBroker(directory / "on", chroots["on"], certificates, {
            "authorizer.class.name": AUTHORIZER, "super.users": "User:admin"})
        for broker in brokers.values():
            broker.start()
        off, on = brokers["off"], brokers["on"]
        listener_topics = {(listener, number): f"{listener.lower()}-{number}"
                           for listener in ("PLAINTEXT", "SASL_SSL") for number in range(rounds)}
        create_topics(off, [B1_TOPIC, *listener_topics.values()])
        create_topics(on, [B1_TOPIC])
        check_authorizer(on)

        def timed(name: str, broker: SecureBroker, call) -> None:
            cpu_before = cpu_s(broker.pid)
            took = call()
            if isinstance(took, tuple):
                took, latency_ms = took
                b1_latency_ms.setdefault(name, []).append(latency_ms)
            seconds.setdefault(name, []).append(took)
            broker_cpu.setdefault(name, []).append(cpu_s(broker.pid) - cpu_before)

        login = {"PLAINTEXT": off.config("PLAINTEXT"), "SASL_SSL": off.config("SASL_SSL", "bench")}
        b1_login = {side: broker.config("SASL_PLAINTEXT", "bench") for side, broker in brokers.items()}
        for side in ("off", "on"):  # warm-up: the broker's first requests, the client library
            produce_b1(b1_login[side], B1_TOPIC, b1_values[:200])
        for number in range(rounds):
            order = ("PLAINTEXT", "SASL_SSL") if number % 2 == 0 else ("SASL_SSL", "PLAINTEXT")
            for listener in order:
                topic = listener_topics[listener, number]
                timed(f"produce {listener}", off, lambda: produce_batched(login[listener], topic, values))
            for listener in order:
                topic = listener_topics[listener, number]
                timed(f"consume {listener}", off, lambda: consume_backlog(login[listener], topic, n))
            for side in (("off", "on") if number % 2 == 0 else ("on", "off")):
                timed(f"b1 {side}", brokers[side], lambda: produce_b1(b1_login[side], B1_TOPIC, b1_values))
    finally:
        for broker in brokers.values():
            broker.stop()
        zookeeper.stop()
        shutil.rmtree(directory, ignore_errors=True)

    counts = {name: (b1 if name.startswith("b1") else n) for name in seconds}
    rate = {name: counts[name] / statistics.median(s) for name, s in seconds.items()}
    cpu_us = {name: statistics.median(c) / counts[name] * 1e6 for name, c in broker_cpu.items()}
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "date": now.isoformat(timespec="seconds"), "machine": machine(), "n": n, "b1": b1, "rounds": rounds,
        "message_bytes": len(values[0]), "acls": ACLS, "load_average_at_start": load_start,
        "load_average": os.getloadavg(), "seconds": round(time.monotonic() - started, 1),
        "rows": {}, "raw_seconds": seconds, "raw_broker_cpu_s": broker_cpu, "raw_b1_latency_ms": b1_latency_ms,
    }
    for row, baseline, name in (("produce SASL_SSL", "produce PLAINTEXT", "listener: produce batched"),
                                ("consume SASL_SSL", "consume PLAINTEXT", "listener: consume backlog"),
                                ("b1 on", "b1 off", "authorizer: produce b1")):
        result["rows"][name] = {
            "records_per_s": rate[row], "baseline_records_per_s": rate[baseline], "ratio": rate[row] / rate[baseline],
            "broker_cpu_us_per_record": cpu_us[row], "baseline_broker_cpu_us_per_record": cpu_us[baseline]}
    authorizer_row = result["rows"]["authorizer: produce b1"]
    # each round's on and off ran back to back: the spread of their ratios shows the noise
    round_ratios = [off_s / on_s for on_s, off_s in zip(seconds["b1 on"], seconds["b1 off"])]
    authorizer_row.update(latency_p50_ms=statistics.median(b1_latency_ms["b1 on"]),
                          baseline_latency_p50_ms=statistics.median(b1_latency_ms["b1 off"]),
                          round_ratios=round_ratios)
    result["target"] = {"ratio": TARGET, "met": authorizer_row["ratio"] >= TARGET}
    text = markdown(result)
    print("\n" + text)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        stamp = now.strftime("%Y-%m-%d")
        (output / f"security-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
        (output / f"security-{stamp}.md").write_text(text)
        print(f"wrote {output}/security-{stamp}.md and .json ({result['seconds']:.0f} s in all)")
    return result


def markdown(result: dict) -> str:
    rows = result["rows"]
    load_start, load_end = result["load_average_at_start"], result["load_average"]
    lines = [
        f"# Security bench, {result['date']}",
        "",
        f"{result['machine']}. Load average (1, 5, 15 min) at the start {load_start[0]:.2f} {load_start[1]:.2f} "
        f"{load_start[2]:.2f}, at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}. Medians of "
        f"{result['rounds']} rounds, the two sides of each row alternating (bench/security.py says how).",
        "",
        f"**Listener** (one broker, the authorizer off; confluent-kafka; {result['n']:,} records of "
        f"{result['message_bytes']} bytes, one partition; SASL_SSL = TLS + SCRAM-SHA-256):",
        "",
        "| row | PLAINTEXT records/s | SASL_SSL records/s | SASL_SSL / PLAINTEXT "
        "| broker CPU us/record (PLAINTEXT, SASL_SSL) |",
        "|---|---:|---:|---:|---|",
    ]
    for name in ("listener: produce batched", "listener: consume backlog"):
        row = rows[name]
        lines.append(f"| {name.split(': ')[1]} | {row['baseline_records_per_s']:,.0f} | {row['records_per_s']:,.0f} | "
                     f"{row['ratio']:.2f}x | {row['baseline_broker_cpu_us_per_record']:.1f}, "
                     f"{row['broker_cpu_us_per_record']:.1f} |")
    row = rows["authorizer: produce b1"]
    lines += [
        "",
        f"**Authorizer** (produce b1: {result['b1']:,} records, one per request, each acknowledged (acks=1) before "
        f"the next; SASL_PLAINTEXT, SCRAM-SHA-256, User:bench; two brokers, off and on with {result['acls']:,} ACLs):",
        "",
        "| | off | on | on / off |",
        "|---|---:|---:|---:|",
        f"| records/s | {row['baseline_records_per_s']:,.0f} | {row['records_per_s']:,.0f} | {row['ratio']:.3f}x |",
        f"| latency p50 ms | {row['baseline_latency_p50_ms']:.3f} | {row['latency_p50_ms']:.3f} | |",
        f"| broker CPU us/record | {row['baseline_broker_cpu_us_per_record']:.1f} | "
        f"{row['broker_cpu_us_per_record']:.1f} | |",
        "",
        f"Each round's on / off: {', '.join(f'{r:.3f}' for r in row['round_ratios'])}.",
        "",
        f"Target (issue 25): on / off >= {result['target']['ratio']}: "
        f"{'met' if result['target']['met'] else 'NOT met'} ({row['ratio']:.3f}x).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.security", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, help=f"records per batched row (default {DEFAULT_N:,})")
    parser.add_argument("--b1", type=int, help=f"records per produce b1 row (default {DEFAULT_B1:,})")
    parser.add_argument("--rounds", type=int, help=f"rounds (default {DEFAULT_ROUNDS})")
    parser.add_argument("--no-write", action="store_true", help="print only; write nothing under bench/results")
    args = parser.parse_args()
    run(args.n, args.b1, args.rounds, output=None if args.no_write else RESULTS)


if __name__ == "__main__":
    main()
