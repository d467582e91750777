"""Today's clients against Kafka-protocol brokers: this broker's modern listener with make run's
defaults beside noida-db (disk), the same client and procedure for both (issue 24's table).

Client: confluent-kafka, 200-byte records (bench/paper.py's seeded payloads), one partition.
Each round visits both brokers (a different one first each round); each figure is the median
of the rounds (3 by default). Rows:

- batched produce, acks=1 and acks=all: ``n`` records, ``linger.ms`` 5 (bench/modern.py's
  ``confluent_produce``), timed until flush() has every acknowledgement;
- one record at a time: ``produce`` then ``flush`` per record (a synchronous send), ``n_sync``
  records; records/s and the broker's CPU per record (/proc, its processes and live children);
- consume a backlog: the acks=1 topic from offset 0 (bench/modern.py's ``confluent_consume``);
- end to end at 5,000 records/s: bench/peers/tbroker_defaults.py's confluent-kafka latency
  roles (librdkafka's defaults, a stamped record per ``produce``), p50 and p99.

tansu, the table's third broker, is not here: it is not on PyPI, Debian or npm, the only
registries this machine reaches (PyPI's "tansu" is another project).

``python -m bench kafka_peers`` (make bench; noida-db comes with the bench extra), or
``python -m bench.kafka_peers --n 200000 --rounds 3``. Writes
``bench/results/kafka-peers-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from importlib.resources import files
from pathlib import Path

from bench.broker_process import BrokerProcess
from bench.modern import _free_port, _values, confluent_consume, confluent_produce
from bench.paper import RESULTS, machine
from bench.peers.harness import LATENCY_RATE, poll_until, port_open
from bench.peers.tbroker_defaults import TwistedBrokerDefaultsModern, make_run_settings
from bench.proc_sample import cpu_seconds

DEFAULT_N = 200_000
DEFAULT_SYNC_N = 3_000
DEFAULT_ROUNDS = 3
LATENCY_SECONDS = 5.0
ROWS = ("produce acks=1", "produce acks=all", "one at a time", "consume", "latency p50 ms", "latency p99 ms")


class TwistedBrokerKafka:
    name = "twisted_broker"
    label = "this broker (make run's defaults)"

    def __init__(self, directory: str) -> None:
        self.port = _free_port()
        self._broker = BrokerProcess(directory, {**make_run_settings(), "kafka.port": str(self.port)})

    def start(self) -> None:
        self._broker.start()

    @property
    def pid(self) -> int:
        return self._broker.process.pid

    def stop(self) -> None:
        self._broker.stop()


class NoidaDb:
    """noida-db's Kafka service alone, on a free loopback port, its data under ``directory``."""

    name = "noida-db"
    label = "noida-db 0.2.3 (disk)"

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = str(files("noida_db").joinpath("noida-db"))
        os.chmod(binary, 0o755)
        with open(os.path.join(self.directory, "noida-db.out"), "wb") as out:
            self.process = subprocess.Popen(
                [binary, "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(self.port),
                 "--data-dir", os.path.join(self.directory, "data")],
                cwd=self.directory, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        poll_until(lambda: port_open(self.port) or self.process.poll() is not None, "noida-db's Kafka port",
                   timeout_s=60, pause_s=0.1)
        if self.process.poll() is not None:
            raise RuntimeError(Path(self.directory, "noida-db.out").read_text()[-2000:])

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # its Ctrl-C: saves and stops
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def one_at_a_time(bootstrap: str, topic: str, values: list[bytes]) -> float:
    """Seconds to send ``values`` one synchronous produce at a time (flush after each)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    producer.list_topics(topic, timeout=30)
    failures: list = []
    started = time.perf_counter()
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda error, _m: error and failures.append(error))
        if producer.flush(30) or failures:
            raise RuntimeError(f"one at a time: {failures[:1] or 'not acknowledged'}")
    return time.perf_counter() - started


def end_to_end(port: int, topic: str, n: int) -> dict:
    """p50/p99 of the confluent-kafka latency roles (a consumer thread, the producer here)."""
    roles = TwistedBrokerDefaultsModern()
    roles.create(type("Server", (), {"modern_port": port})(), topic)
    received: dict = {}
    ready = threading.Event()

    def consume() -> None:
        try:
            received.update(roles.latency_consume(modern_port=port, dest=topic, n=n, go=ready.set))
        except Exception as exc:  # noqa: BLE001 - reported by the producer's side
            received["error"] = exc
            ready.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait(60)
    roles.latency_produce(modern_port=port, dest=topic, n=n, rate=LATENCY_RATE, go=lambda: None)
    thread.join(120)
    if "error" in received or "p99_ms" not in received:
        raise RuntimeError(f"end to end: {received.get('error', 'no answer')}")
    return received


def round_of(server, number: int, n: int, n_sync: int, values: list[bytes], raw: dict) -> None:
    bootstrap = f"127.0.0.1:{server.port}"
    figures = raw.setdefault(server.name, {})

    def timed(row: str, call, count: int) -> None:
        before = cpu_seconds([server.pid])
        seconds = call()
        figures.setdefault(row, []).append(count / seconds)
        figures.setdefault(f"{row} broker CPU us", []).append((cpu_seconds([server.pid]) - before) / count * 1e6)

    for acks in ("1", "all"):
        timed(f"produce acks={acks}", lambda: confluent_produce(bootstrap, f"acks-{acks}-{number}", values, acks), n)
    timed("one at a time", lambda: one_at_a_time(bootstrap, f"sync-{number}", values[:n_sync]), n_sync)
    timed("consume", lambda: confluent_consume(bootstrap, f"acks-1-{number}", n), n)
    latency = end_to_end(server.port, f"e2e-{number}", int(LATENCY_SECONDS * LATENCY_RATE))
    figures.setdefault("latency p50 ms", []).append(latency["p50_ms"])
    figures.setdefault("latency p99 ms", []).append(latency["p99_ms"])


def run(n: int | None = None, rounds: int | None = None, n_sync: int | None = None, output: Path = RESULTS) -> dict:
    n = n or int(os.environ.get("BENCH_KAFKA_PEERS_N") or DEFAULT_N)
    rounds = rounds or int(os.environ.get("BENCH_KAFKA_PEERS_ROUNDS") or DEFAULT_ROUNDS)
    n_sync = n_sync or DEFAULT_SYNC_N
    directory = tempfile.mkdtemp(prefix="tb-kafka-peers-", dir=os.environ.get("BENCH_DIR"))
    values = _values(n)
    servers = []
    raw: dict = {}
    load = os.getloadavg()
    try:
        for kind in (TwistedBrokerKafka, NoidaDb):
            home = os.path.join(directory, kind.name)
            os.makedirs(home)
            server = kind(home)
            server.start()
            servers.append(server)
        for number in range(rounds):
            order = servers[number % 2:] + servers[:number % 2]
            for server in order:
                began = time.monotonic()
                round_of(server, number, n, n_sync, values, raw)
                print(f"  round {number + 1}: {server.name} done in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    medians = {name: {row: statistics.median(v) for row, v in rows.items()} for name, rows in raw.items()}
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
              "n": n, "n_sync": n_sync, "rounds": rounds, "load_average_at_start": load, "medians": medians,
              "rounds_figures": raw, "labels": {server.name: server.label for server in servers}}
    print(f"\nkafka peers: confluent-kafka, {n:,} records of 200 bytes ({n_sync:,} one at a time), median of "
          f"{rounds} rounds; load average {load[0]:.2f} at the start")
    print(f"{'':28} {'this broker':>14} {'noida-db':>14} {'ratio':>7}   (latency: lower is better)")
    for row in ROWS:
        mine, theirs = medians["twisted_broker"][row], medians["noida-db"][row]
        print(f"{row:28} {mine:14,.2f} {theirs:14,.2f} {mine / theirs:6.2f}x")
    for row in ("one at a time broker CPU us",):
        print(f"{row:28} {medians['twisted_broker'][row]:14,.1f} {medians['noida-db'][row]:14,.1f}")
    output.mkdir(parents=True, exist_ok=True)
    (output / f"kafka-peers-{result['date'][:10]}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--sync-n", type=int)
    args = parser.parse_args()
    run(args.n, args.rounds, args.sync_n)


if __name__ == "__main__":
    main()
