"""Produce and fetch throughput of a real broker process, beside raw loopback baselines.

Workload (issue 2/7, item 7): 200-byte messages to one partition of a ``twistd -n broker``
configured as etc/server.properties (flush every 10,000 messages or 1,000 ms, 1 GiB segments,
no ZooKeeper), its log under a temp directory in ``BENCH_DIR`` (default: the system's).
Every client is a ``bench/loadgen.py`` process of its own; everything it sends is encoded
before the clock starts.

- Produce: requests of 1 and of 50 messages written back to back on one connection (and on
  two in parallel for batches of 50). Produce has no response, so the clock stops when an
  Offsets(-1) poll shows the expected end offset: every message appended, fsynced and visible.
  Message counts are multiples of the flush interval, so the last append starts the last
  flush; the flush timer would otherwise add up to a second. The baseline writes the same
  request bytes to a server that reads and discards them (loopback TCP, one Python reader).
- Fetch: a backlog of ``fetch_gb`` GB, produced in one more round of batches of 50, fetched
  sequentially from offset 0 with 1 MiB and 4 MiB fetches, each response read whole into one
  reusable buffer. The baseline is a Python
  server that sends the broker's own segment files (page-cached) with os.sendfile, in the
  same request/response chunks, to the same client code. The two alternate every tenth of
  the backlog; each round sums the tenths of each.

MB/s counts message-set bytes (210 per message: length, magic-1 header, payload). Broker
and baseline rounds alternate and each keeps its median, so drift on this shared 2-core
machine hits both. Run it with ``python -m bench broker``, or ``python -m bench.broker_bench
--fetch-gb 2`` for the options.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.broker_process import BROKER_PROPERTIES, FLUSH_INTERVAL, BrokerProcess, OffsetsClient
from bench.line_process import LineProcess

MESSAGE_BYTES = 200
ENTRY_BYTES = 4 + 6 + MESSAGE_BYTES  # length field, magic-1 header, payload
BATCH = 50
FETCH_SIZES = (1 << 20, 4 << 20)
FETCH_SLICES = 10  # broker and baseline alternate every tenth of the backlog
TOPIC = "bench"
PRODUCE_TARGET = 400_000  # messages/s with batches of 50 (issue 2/7)
FETCH_TARGET = 0.5  # of raw sendfile loopback (issue 2/7)
POLL_S = 0.0002  # between Offsets polls once the producers have written everything
TIMEOUT_S = 300.0

LOADGEN = str(Path(__file__).with_name("loadgen.py"))
class _Child(LineProcess):
    """A load generator process (bench/loadgen.py); stopping it kills it."""

    def __init__(self, name: str, args: list[str], directory: str) -> None:
        super().__init__(name, args, directory, timeout_s=TIMEOUT_S)

    def stop(self) -> None:
        self.kill()


class _Bench:
    """The processes of one run; ``close()`` stops every one of them."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.children: list[_Child] = []
        self._count = 0

    def spawn(self, mode: str, *args: object) -> _Child:
        self._count += 1
        child = _Child(f"loadgen-{mode}-{self._count}", [sys.executable, LOADGEN, mode, *map(str, args)],
                       self.directory)
        self.children.append(child)
        return child

    def release(self, child: _Child) -> None:
        child.stop()
        self.children.remove(child)

    def close(self) -> None:
        for child in self.children:
            child.stop()
        self.children.clear()

    def produce(self, port: int, messages: int, batch: int, connections: int = 1, *,
                topic: str = TOPIC, offsets: OffsetsClient | None = None) -> dict:
        """Time ``messages`` in requests of ``batch`` over ``connections``; with ``offsets``
        (a broker) until they are visible, else (the sink) until the server has read them."""
        start = offsets.end(topic) if offsets is not None else 0
        producers = [self.spawn("produce", "--port", port, "--topic", topic, "--batch", batch,
                                "--message-bytes", MESSAGE_BYTES, "--messages", messages // connections)
                     for _ in range(connections)]
        try:
            for producer in producers:
                producer.expect("ready")
            started = time.perf_counter()
            for producer in producers:
                producer.send("go")
            for producer in producers:
                producer.line()  # "sent SECONDS": its last write returned
            sent = time.perf_counter() - started
            visible = None
            if offsets is not None:
                expected = start + messages * ENTRY_BYTES
                while (end := offsets.end(topic)) < expected:
                    if time.perf_counter() - started > TIMEOUT_S:
                        raise TimeoutError(f"end offset {end}, expected {expected}")
                    time.sleep(POLL_S)
                visible = time.perf_counter() - started
                if end != expected:
                    raise RuntimeError(f"end offset {end}, expected {expected}")
            reports = [json.loads(producer.line()) for producer in producers]
        finally:
            for producer in producers:
                self.release(producer)
        if any(report["unexpected_response_bytes"] for report in reports):
            raise RuntimeError(f"produce requests were answered: {reports}")
        drained = max(report["drained_s"] for report in reports)
        return {"seconds": visible if visible is not None else drained, "sent_s": sent, "drained_s": drained}

    def consumer(self, port: int, max_size: int, raw: bool) -> _Child:
        """A consumer connected to ``port``, fetching ``max_size`` at a time (see ``fetch``)."""
        args = ["--port", port, "--max-size", max_size]
        if not raw:
            args += ["--topic", TOPIC, "--entry-bytes", ENTRY_BYTES]
        consumer = self.spawn("raw-fetch" if raw else "fetch", *args)
        consumer.expect("ready")
        return consumer

    @staticmethod
    def fetch(consumer: _Child, start: int, end: int) -> float:
        """Seconds ``consumer`` took to fetch offsets [start, end), by its own clock."""
        consumer.send(f"{start} {end}")
        return json.loads(consumer.line())["elapsed_s"]

    def server(self, mode: str, *args: object) -> tuple[_Child, int]:
        server = self.spawn(mode, *args)
        return server, int(server.line(30))


def _round_up(value: float, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def _env_number(name: str, default: float) -> float:
    text = os.environ.get(name)
    return float(text) if text else default


def _check_disk(directory: str, needed_bytes: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed_bytes * 1.1 + (1 << 30):
        raise RuntimeError(f"{directory} has {free / 1e9:.1f} GB free; the benchmark writes "
                           f"{needed_bytes / 1e9:.1f} GB (set BENCH_DIR, or lower BENCH_FETCH_GB)")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(fetch_gb: float | None = None, produce_messages: int | None = None, rounds: int = 3,
        b1_messages: int | None = None) -> dict:
    """Run the benchmark, print its table, return the figures.

    ``fetch_gb`` (env BENCH_FETCH_GB, default 1) is the backlog fetched, in 10^9 bytes;
    ``produce_messages`` (env BENCH_PRODUCE_MESSAGES, default 1,000,000) the messages per
    produce round with batches of 50; ``b1_messages`` (default a tenth of it) with batches of 1.
    Counts are rounded up to multiples of the flush interval.
    """
    fetch_gb = fetch_gb if fetch_gb is not None else _env_number("BENCH_FETCH_GB", 1.0)
    produce_messages = produce_messages or int(_env_number("BENCH_PRODUCE_MESSAGES", 1_000_000))
    produce_messages = _round_up(produce_messages, FLUSH_INTERVAL)
    b1_messages = _round_up(b1_messages or produce_messages // 10, FLUSH_INTERVAL)
    directory = tempfile.mkdtemp(prefix="tb-broker-bench-", dir=os.environ.get("BENCH_DIR"))
    bench = _Bench(directory)
    broker = BrokerProcess(directory)
    offsets = None
    # SIGTERM unwinds like Ctrl-C, so the finally below still stops every child.
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _check_disk(directory, int((rounds * (b1_messages + 2 * produce_messages) * ENTRY_BYTES) + fetch_gb * 1e9))
        broker.start()
        offsets = OffsetsClient(broker.port)
        sink, sink_port = bench.server("serve-sink")
        times: dict[str, list[float]] = {}
        tails: dict[str, list[float]] = {}

        def record(name: str, result: dict) -> None:
            times.setdefault(name, []).append(result["seconds"])
            if not name.startswith("sink"):
                # How long after the broker had handled the last request the data became visible.
                tails.setdefault(name, []).append(result["seconds"] - result["drained_s"])

        # Each produce round writes a topic of its own: a segment roll inside a round would
        # flush early, and the round's last messages would then wait for the flush timer.
        for number in range(rounds):
            record("sink_b1", bench.produce(sink_port, b1_messages, 1))
            record("b1", bench.produce(broker.port, b1_messages, 1, topic=f"b1-{number}", offsets=offsets))
            record("sink_b50", bench.produce(sink_port, produce_messages, BATCH))
            record("b50", bench.produce(broker.port, produce_messages, BATCH, topic=f"b50-{number}", offsets=offsets))
            record("b50x2", bench.produce(broker.port, produce_messages, BATCH, 2, topic=f"b50x2-{number}",
                                          offsets=offsets))
        bench.release(sink)

        # The backlog, in one more round of batches of 50. Every entry has the same size, so
        # its first fetch_gb end on an entry boundary. (Above 1 GiB it rolls a segment, and
        # this round's figure then includes a wait for the flush timer.)
        end = _round_up(fetch_gb * 1e9, ENTRY_BYTES)
        fill_messages = _round_up(end / ENTRY_BYTES, FLUSH_INTERVAL)
        record("fill", bench.produce(broker.port, fill_messages, BATCH, offsets=offsets))
        log_end = offsets.end(TOPIC)
        files = broker.segment_files(TOPIC)
        if sum(os.path.getsize(path) for path in files) != log_end:
            raise RuntimeError(f"segment files {files} do not add up to the end offset {log_end}")

        raw_server, raw_port = bench.server("serve-sendfile", "--send-buffer", BROKER_PROPERTIES["socket.send.buffer"],
                                            *(arg for path in files for arg in ("--file", path)))
        # Each round reads the backlog once per fetch size through the broker and once raw,
        # alternating in slices of a tenth, so that even a short burst of load from elsewhere
        # hits both sides about equally. Each round has consumer processes of its own: on this
        # VM the same code streams at anywhere from 1.5 to 5 GB/s from one process pair to the
        # next (raw and broker alike), and fresh pairs per round let the medians sample that.
        slice_bytes = _round_up(end / FETCH_SLICES, ENTRY_BYTES)
        slices = [(start, min(start + slice_bytes, end)) for start in range(0, end, slice_bytes)]
        for _ in range(rounds):
            for max_size in FETCH_SIZES:
                consumers = {raw: bench.consumer(raw_port if raw else broker.port, max_size, raw)
                             for raw in (True, False)}
                spent = {True: 0.0, False: 0.0}
                for start, stop in slices:
                    for raw in (True, False):
                        spent[raw] += bench.fetch(consumers[raw], start, stop)
                for consumer in consumers.values():
                    bench.release(consumer)
                times.setdefault(f"raw_{max_size}", []).append(spent[True])
                times.setdefault(f"fetch_{max_size}", []).append(spent[False])
        bench.release(raw_server)
    finally:
        if offsets is not None:
            offsets.close()
        bench.close()
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)

    median = {name: statistics.median(values) for name, values in times.items()}
    counts = {"sink_b1": b1_messages, "b1": b1_messages, "sink_b50": produce_messages,
              "b50": produce_messages, "b50x2": produce_messages, "fill": fill_messages}
    counts.update({f"{kind}_{size}": end // ENTRY_BYTES for kind in ("raw", "fetch") for size in FETCH_SIZES})
    rows = [
        ("loopback to a discarding reader, 1 per request (baseline)", "sink_b1", "sink_b1"),
        ("produce, 1 per request, 1 connection", "b1", "sink_b1"),
        ("loopback to a discarding reader, 50 per request (baseline)", "sink_b50", "sink_b50"),
        ("produce, 50 per request, 1 connection", "b50", "sink_b50"),
        ("produce, 50 per request, 2 connections", "b50x2", "sink_b50"),
        (f"produce, 50 per request, the backlog ({fill_messages:,}, 1 round)", "fill", "sink_b50"),
    ]
    for size in FETCH_SIZES:
        rows += [(f"raw os.sendfile loopback, {size >> 20} MiB chunks (baseline)", f"raw_{size}", f"raw_{size}"),
                 (f"fetch {size >> 20} MiB, 1 connection", f"fetch_{size}", f"raw_{size}")]
    load = os.getloadavg()
    print(f"\nbroker: {MESSAGE_BYTES}-byte messages, twistd -n broker flushing every {FLUSH_INTERVAL:,} "
          f"messages, produce timed until visible; fetch of {end / 1e9:.2f} GB ({end // ENTRY_BYTES:,} "
          f"messages); median of {rounds} alternating rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'':62} {'msgs/s':>12} {'MB/s':>9} {'vs baseline':>12}")
    results: dict = {}
    for label, name, baseline in rows:
        seconds = median[name]
        count = counts[name]
        ratio = median[baseline] * counts[name] / counts[baseline] / seconds
        print(f"{label:62} {count / seconds:12,.0f} {count * ENTRY_BYTES / seconds / 1e6:9.0f} {ratio:11.2f}x")
        results[name] = {"msgs_per_s": count / seconds, "MB_per_s": count * ENTRY_BYTES / seconds / 1e6,
                         "ratio_to_baseline": ratio, "messages": count, "rounds_s": times[name]}
        if name in tails:
            results[name]["visible_after_drained_ms"] = statistics.median(tails[name]) * 1000
    best_b50 = max(results["b50"]["msgs_per_s"], results["b50x2"]["msgs_per_s"])
    worst_fetch = min(results[f"fetch_{size}"]["ratio_to_baseline"] for size in FETCH_SIZES)
    results["targets"] = {
        "produce_b50_msgs_per_s": {"target": PRODUCE_TARGET, "best": best_b50, "met": best_b50 >= PRODUCE_TARGET},
        "fetch_vs_sendfile": {"target": FETCH_TARGET, "worst": worst_fetch, "met": worst_fetch >= FETCH_TARGET},
    }
    results["load_average"] = load
    tail_ms = ", ".join(f"{name} {results[name]['visible_after_drained_ms']:.0f}"
                        for name in ("b1", "b50", "b50x2", "fill"))
    print(f"visible after the broker had read the last request (ms, median): {tail_ms}")
    print(f"target produce b50 >= {PRODUCE_TARGET:,} msgs/s: {'met' if best_b50 >= PRODUCE_TARGET else 'NOT met'} "
          f"({best_b50:,.0f}); target fetch >= {FETCH_TARGET}x raw sendfile: "
          f"{'met' if worst_fetch >= FETCH_TARGET else 'NOT met'} ({worst_fetch:.2f}x at worst)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch-gb", type=float, help="backlog to fetch, GB (env BENCH_FETCH_GB, default 1)")
    parser.add_argument("--produce-messages", type=int,
                        help="messages per produce round of 50-message batches (env BENCH_PRODUCE_MESSAGES, "
                             "default 1,000,000)")
    parser.add_argument("--b1-messages", type=int, help="messages per round of 1-message requests "
                                                        "(default a tenth of --produce-messages)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run(fetch_gb=args.fetch_gb, produce_messages=args.produce_messages, rounds=args.rounds,
        b1_messages=args.b1_messages)


if __name__ == "__main__":
    main()
