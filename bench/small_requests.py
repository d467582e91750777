"""``python -m bench small``: issue 24's "measure it where it lives": the broker's CPU per small
request beside a floor that does the least any server must (bench/small_floor.py), row by row,
in one run on this machine.

For each row a fresh server (bench/small_servers.py) and a fresh floor are started; each is
warmed up with a few hundred requests, then driven with the row's requests (bench/small_clients.py:
raw sockets, requests encoded once by the project's codecs), the broker first, then the floor.
/proc (bench/proc_sample.py) is read just before and just after: CPU of all threads of the
measured process, its live threads' context switches, its children's CPU (the broker's fsync
process: ``log.flush.worker=process``). Figures are per request (per message delivered, for
the two rows that deliver to a consumer); ratio = broker / floor.

``BENCH_REACTOR=uvloop`` runs the brokers under ``twistd -r uvloop`` (Twisted's asyncio reactor
on uvloop; twisted_broker/network/uvloop_reactor.py) instead of the default epoll reactor; the
floor stays on epoll. Three runs of each, alternating, on 2026-12-07: uvloop used 2-9% more
broker CPU per request on six rows and the same on the latency run
(bench/results/small-reactors-2026-12-07.json), so epoll stays the default.

Rows (``BENCH_SMALL_SCALE`` multiplies every count; 1 by default):
- 0.7 Produce of one message, pipelined (200,000 written back to back; 0.7 Produce has no answer).
- 0.7 Offsets, one at a time (20,000 round trips) — one wake, one read, one answer.
- 0.7 ProduceAck acks=1 of one message, one at a time (replication's request on the 0.7 port:
  the broker runs with a ZooKeeper, as it needs one to serve it; a 0.7 topic).
- modern Produce v3 of one record, acks=1, one at a time (20,000), on the modern listener.
- modern Produce v3 acks=all to a factor-3 topic, one at a time (5,000): three brokers and a
  ZooKeeper; broker CPU is the leader's (the column "all brokers" adds the two followers').
- 0.7 Fetch woken at the log end (10,000 messages): a consumer's Fetch is held at the end, a
  producer sends one message, the answer wakes the consumer, which asks again. The broker runs
  bench/peers/tbroker.py's latency settings (each append asks for a flush; a consumer sees a
  message once fsynced), the floor answers a held fetch when an append arrives (no fsync).
- latency run: 5,000 messages/s, one 0.7 Produce per message, one consumer long-polling at the
  end, factor 1 (the same settings): CPU per message end to end, and the wakes per message:
  the measured process's context switches (voluntary + involuntary, summed over its live
  threads' /proc status) per message delivered; the fsync process's are not in it. How many
  messages each Fetch answer brought is beside it: above 1, the server coalesced (a backlog).
"""

from __future__ import annotations

import datetime
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench import small_clients as clients
from bench.proc_sample import ProcessSample
from bench.small_report import print_table, write_results
from bench.small_servers import FloorProcess, ReplicatedCluster3, SingleBroker, latency_broker
from twisted_broker.codec.kafka07.replication import decode_produce_acks

SMALL_RATE = 5_000  # messages/s of the latency run
WARM_UP = 300


@dataclass(frozen=True)
class SmallRow:
    key: str
    label: str
    count: int  # requests (messages, for the two fetch rows) measured on each server
    server: Callable[[str], object]  # a directory -> a server not yet started
    drive: Callable[[object, str, int], dict]  # (server, topic, count) -> figures of the client


def _check_07(answer: bytes) -> None:
    if clients.error_07(answer):
        raise RuntimeError(f"answered error {clients.error_07(answer)}")


def _check_acks(answer: bytes) -> None:
    _check_07(answer)
    errors = [error for _topic, _partition, error, _offset in decode_produce_acks(answer[2:])]
    if any(errors):
        raise RuntimeError(f"ProduceAck answered errors {errors}")


def _check_modern(answer: bytes) -> None:
    if clients.modern_produce_errors(answer) != [0]:
        raise RuntimeError(f"Produce answered errors {clients.modern_produce_errors(answer)}")


def _round_trips(rtts: list[int]) -> dict:
    ordered = sorted(rtts)
    return {"rtt_p50_us": ordered[len(ordered) // 2] / 1e3, "rtt_p99_us": ordered[int(len(ordered) * 0.99)] / 1e3,
            "rtt_mean_us": statistics.fmean(ordered) / 1e3}


def _pipelined(server, topic: str, n: int) -> dict:
    clients.pipelined(server.port, clients.produce_07(topic), n, topic)
    return {"requests": n}


def _offsets(server, topic: str, n: int) -> dict:
    return {"requests": n, **_round_trips(clients.one_at_a_time(server.port, clients.offsets_07(topic), n, _check_07))}


def _produce_ack(server, topic: str, n: int) -> dict:
    rtts = clients.one_at_a_time(server.port, clients.produce_ack_07(topic, 1), n, _check_acks)
    return {"requests": n, **_round_trips(rtts)}


def _modern(acks: int):
    def drive(server, topic: str, n: int) -> dict:
        rtts = clients.one_at_a_time(server.modern_port, clients.modern_produce(topic, acks), n, _check_modern)
        return {"requests": n, **_round_trips(rtts)}
    return drive


def _fetch_woken(server, topic: str, n: int) -> dict:
    return {"requests": clients.fetch_woken(server.port, topic, n)}


def _latency(server, topic: str, n: int) -> dict:
    latencies, answers = clients.paced_latency(server.port, topic, n, SMALL_RATE)
    delivered = len(latencies)
    if delivered < n:
        raise RuntimeError(f"the latency run delivered {delivered} of {n} messages")
    ordered = sorted(latencies[len(latencies) // 50:])  # the first 2% dropped, as bench/paper.py does
    return {"requests": delivered, "messages_per_fetch_answer": delivered / answers, "latency_p50_ms": ordered[len(ordered) // 2] / 1e6,
            "latency_p99_ms": ordered[int(len(ordered) * 0.99)] / 1e6}


def rows(scale: float = 1.0) -> list[SmallRow]:
    def count(n: int) -> int:
        return max(WARM_UP, int(n * scale))
    return [
        SmallRow("produce07_pipelined", "0.7 Produce, 1 message, pipelined", count(200_000), SingleBroker, _pipelined),
        SmallRow("offsets07_one_at_a_time", "0.7 Offsets, one at a time", count(20_000), SingleBroker, _offsets),
        SmallRow("produce_ack07_acks1", "0.7 ProduceAck acks=1, 1 message, one at a time", count(20_000),
                 lambda d: SingleBroker(d, zookeeper=True), _produce_ack),
        SmallRow("modern_produce_acks1", "modern Produce v3, 1 record, acks=1, one at a time", count(20_000),
                 SingleBroker, _modern(1)),
        SmallRow("modern_produce_acks_all_rf3", "modern Produce v3, 1 record, acks=all, factor 3, one at a time",
                 count(5_000), ReplicatedCluster3, _modern(-1)),
        SmallRow("fetch07_woken", "0.7 Fetch woken at the log end (per message)", count(10_000), latency_broker,
                 _fetch_woken),
        SmallRow("latency_5000", f"latency run, {SMALL_RATE:,} msg/s, factor 1 (per message)", count(20_000),
                 latency_broker, _latency),
    ]


def _prepare(server, topic: str) -> None:
    """Create ``topic`` and wait until it can be read at its end (each server's own way)."""
    if isinstance(server, ReplicatedCluster3):
        server.use(topic)
        return
    clients.pipelined(server.port, clients.produce_07(topic), 1, topic)
    deadline = time.monotonic() + 30
    while clients.latest_offset(server.port, topic) == 0:  # visible once flushed (latency settings)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: the first message never became visible")
        time.sleep(0.05)


def _warm_up(server, row: SmallRow, topic: str) -> None:
    deadline = time.monotonic() + 30
    while True:  # a broker just started may refuse a first ProduceAck (state not read from ZooKeeper)
        try:
            row.drive(server, topic, min(WARM_UP, row.count))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def measure(server, row: SmallRow, topic: str, pids: list[int]) -> dict:
    """Drive ``row`` against ``server``; /proc of ``server.pid`` (and ``pids``) around it."""
    before = {pid: ProcessSample.take(pid) for pid in {server.pid, *pids}}
    started = time.perf_counter()
    figures = row.drive(server, topic, row.count)
    seconds = time.perf_counter() - started
    used = {pid: ProcessSample.take(pid).since(sample) for pid, sample in before.items()}
    n = figures["requests"]
    own = used[server.pid]
    return {**figures, "seconds": round(seconds, 3), "cpu_s": own.cpu_s, "cpu_us": own.cpu_s / n * 1e6,
            "switches": own.switches / n, "voluntary": own.voluntary / n, "involuntary": own.involuntary / n,
            "children_cpu_us": own.children_cpu_s / n * 1e6,
            "all_cpu_us": sum(u.cpu_s + u.children_cpu_s for u in used.values()) / n * 1e6}


def run_row(row: SmallRow, directory: str) -> dict:
    load = os.getloadavg()
    result: dict = {"label": row.label, "count": row.count, "load_average_at_start": load}
    for side, make in (("broker", row.server), ("floor", FloorProcess)):
        server = make(os.path.join(directory, f"{row.key}-{side}"))
        try:
            server.start()
            topic = f"small-{row.key}".replace("_", "-")
            if side == "broker":
                _prepare(server, topic)
            _warm_up(server, row, topic)
            pids = list(getattr(server, "pids", [server.pid]))
            result[side] = measure(server, row, topic, pids)
        finally:
            server.stop()
    result["ratio"] = result["broker"]["cpu_us"] / result["floor"]["cpu_us"] if result["floor"]["cpu_us"] else None
    return result


def run(names: list[str] | None = None) -> dict:
    """Run every row (or those whose key is in ``names``), print the table, write the results."""
    scale = float(os.environ.get("BENCH_SMALL_SCALE") or 1)
    unknown = set(names or ()) - {row.key for row in rows(scale)}
    if unknown:  # before anything runs: a typo must not write an empty table over the results
        raise SystemExit(f"unknown row {', '.join(sorted(unknown))}; rows: {', '.join(r.key for r in rows(scale))}")
    directory = tempfile.mkdtemp(prefix="tb-small-bench-", dir=os.environ.get("BENCH_DIR"))
    started = time.monotonic()
    load = os.getloadavg()
    reactor = os.environ.get("BENCH_REACTOR") or "epoll (twistd's default)"
    print(f"\nsmall requests (issue 24): load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start; "
          f"the brokers' reactor: {reactor}")
    results: dict = {}
    try:
        for row in rows(scale):
            if names and row.key not in names:
                continue
            results[row.key] = run_row(row, directory)
            figures = results[row.key]
            print(f"  {row.label}: broker {figures['broker']['cpu_us']:.1f} us, floor "
                  f"{figures['floor']['cpu_us']:.1f} us per request, ratio {figures['ratio']:.2f}x", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {"date": now.isoformat(timespec="seconds"), "load_average_at_start": load, "scale": scale, "reactor": reactor,
              "seconds": round(time.monotonic() - started, 1), "rows": results}
    print_table(result)
    write_results(result, Path(__file__).resolve().parent / "results")
    return result


if __name__ == "__main__":
    import sys
    run(sys.argv[1:] or None)
