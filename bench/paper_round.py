"""One round of bench/paper.py's comparison for one system: its tests in order, and the figures
each records (the workload is in paper.py's docstring).

A round's tests are closures over one round of one system (``peer``, ``server``, ``n``,
``number``) and call back into the paper's Run (paper.Run: ``timed``, ``worker``, ``loadgen``,
``release``, ``raw``, ``notes``), which owns the processes and the figures. twisted_broker
alone also runs gzip, the async producer, the high-level consumer, fetch vs raw os.sendfile
and the fsync floor.
"""

from __future__ import annotations

import os
import statistics

from bench.peers.harness import BATCH, LATENCY_RATE, MESSAGE_BYTES, disk_usage, settled_disk_usage
from bench.peers.report import TB, TB_RF3
from bench.proc_sample import cpu_seconds

FETCH_REPEATS = 5  # broker and raw sendfile alternate this often per round



def latency_test(run, key: str, dest: str, pids: list[int] | None = None) -> dict:
    """The latency test of ``key`` on a new topic ``dest``: a consumer subscribed first, then
    a producer of ``run.latency_messages`` stamped messages at LATENCY_RATE. Returns the
    consumer's percentiles (ms), the producer's rate and, with ``pids``, the CPU seconds those
    processes used from the producer's start to the consumer's last message (``cpu_s``)."""
    run.peers[key].create(run.servers[key], dest)
    consumer = run.worker(key, "latency_consume", dest=dest, n=run.latency_messages)
    producer = None
    try:
        consumer.expect_ready()
        consumer.go()
        producer = run.worker(key, "latency_produce", dest=dest, n=run.latency_messages, rate=LATENCY_RATE)
        producer.expect_ready()
        before = cpu_seconds(pids or [])
        producer.go()
        sent = producer.result()
        received = consumer.result(120)
        used = cpu_seconds(pids or []) - before
    finally:
        run.release(*(worker for worker in (consumer, producer) if worker is not None))
    return {**received, "rate": run.latency_messages / sent["seconds"], "cpu_s": used}


def play_round(run, key: str, number: int, profile: str | None = None) -> None:
    """One round of the system ``key`` in ``run`` (paper.Run): its tests, in order; each records
    its figures in ``run.raw[key]``, and a failed one a note in ``run.notes[key]``."""
    peer, server, raw, n = run.peers[key], run.servers[key], run.raw[key], run.n

    def record(name: str, value: float) -> None:
        raw[name].append(value)

    def attempt(what: str, action) -> None:
        if what in peer.skip:
            return
        try:
            action()
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - one failed test must not stop the run
            message = f"round {number}, {what}: {type(exc).__name__}: {str(exc).strip()[:1500]}"
            run.notes[key].append(message)
            print(f"    {key}: FAILED {message}", flush=True)

    def produce(batch: int, **options) -> None:
        suffix = "".join(f"_{name}{value}" for name, value in options.items())  # "_acks1"
        dest = f"b{batch}{suffix.replace('_', '-')}-{number}"
        peer.create(server, dest)
        before = disk_usage(server.data_dir)
        count = n // 5 if profile is not None and batch == 1 else n  # the profile's b1 would take long
        result = run.timed(key, "produce", profiled(f"produce_b{batch}"), dest=dest, n=count, batch=batch,
                           **options)
        record(f"produce_b{batch}{suffix}", count / result["seconds"])
        record(f"produce_b{batch}{suffix}_sent", count / result["sent_s"])
        if options:
            return
        if batch == BATCH:
            allocated, apparent = settled_disk_usage(server.data_dir)
            record("bytes_per_msg", (apparent - before[1]) / n)
            record("bytes_per_msg_allocated", (allocated - before[0]) / n)
        elif key != TB:
            peer.delete(server, dest)

    def consume() -> None:
        result = run.timed(key, "consume", profiled("consume"), dest=f"b{BATCH}-{number}", n=n)
        if result.get("payload_bytes", n * MESSAGE_BYTES) != n * MESSAGE_BYTES:
            raise RuntimeError(f"{result['payload_bytes']} payload bytes received, expected {n * MESSAGE_BYTES}")
        record("consume", n / result["seconds"])

    def gzip() -> None:
        dest = f"gzip-{number}"
        before = disk_usage(server.data_dir)
        result = run.timed(key, "produce", dest=dest, n=n, batch=BATCH, codec="gzip")
        allocated, apparent = settled_disk_usage(server.data_dir)
        record("produce_gzip_b50", n / result["seconds"])
        record("bytes_per_msg_gzip", (apparent - before[1]) / n)
        record("bytes_per_msg_gzip_allocated", (allocated - before[0]) / n)

    def async_producer() -> None:
        result = run.timed(key, "produce_async", dest=f"async-{number}", n=n)
        record("produce_async", n / result["seconds"])

    def high_level() -> None:
        if server.zookeeper is None:
            return
        result = run.timed(key, "consume_hl", dest=f"b{BATCH}-{number}", n=n)
        if result["payload_bytes"] != n * MESSAGE_BYTES:
            raise RuntimeError(f"{result['payload_bytes']} payload bytes received, expected {n * MESSAGE_BYTES}")
        record("consume_hl", n / result["seconds"])
        record("consume_hl_subscribe_ms", result["subscribe_s"] * 1000)

    def fetch() -> None:
        fetch_vs_sendfile(run, server, f"b{BATCH}-{number}")

    def latency() -> None:
        dest = f"lat-{number}"
        result = latency_test(run, key, dest)
        record("p50_ms", result["p50_ms"])
        record("p99_ms", result["p99_ms"])
        record("max_ms", result["max_ms"])
        record("latency_rate", result["rate"])
        if key != TB:
            peer.delete(server, dest)

    def fsync_floor() -> None:
        floor = run.loadgen("fsync-floor", "--dir", os.path.dirname(server.data_dir), "--rate", LATENCY_RATE,
                            "--seconds", run.latency_messages / LATENCY_RATE)
        try:
            result = floor.result()
        finally:
            run.release(floor)
        record("fsync_floor_p50_ms", result["p50_ms"])
        record("fsync_floor_p99_ms", result["p99_ms"])

    def profiled(name: str) -> str | None:
        return None if profile is None else os.path.join(profile, name)

    attempt("produce b1", lambda: produce(1))
    attempt("produce b50", lambda: produce(BATCH))
    attempt("consume", consume)
    if profile is not None:
        return
    if key == TB_RF3:
        attempt("produce b50 acks=1", lambda: produce(BATCH, acks=1))
    if key == TB:
        attempt("gzip", gzip)
        attempt("async producer", async_producer)
        attempt("high-level consumer", high_level)
        attempt("fetch vs sendfile", fetch)
    else:
        attempt("delete", lambda: peer.delete(server, f"b{BATCH}-{number}"))
    attempt("latency", latency)
    if key == TB:
        attempt("fsync floor", fsync_floor)


def fetch_vs_sendfile(run, server, topic: str) -> None:
    """Fetch the topic whole with bench/loadgen.py's client, from the broker and from a raw
    sendfile server over the same segment files, alternating FETCH_REPEATS times."""
    files = server.segment_files(topic)
    end = sum(os.path.getsize(path) for path in files)
    raw_server = run.loadgen("serve-sendfile", "--send-buffer", 1 << 20,
                             *(arg for path in files for arg in ("--file", path)))
    clients = []
    try:
        raw_port = int(raw_server.line(30))
        clients = [run.loadgen("raw-fetch", "--port", raw_port, "--max-size", 1 << 20),
                   run.loadgen("fetch", "--port", server.port, "--topic", topic, "--max-size", 1 << 20,
                               "--entry-bytes", 4 + 6 + MESSAGE_BYTES)]
        for client in clients:
            client.expect_ready()
        spent = {"sendfile_MBps": [], "fetch_MBps": []}
        for _ in range(FETCH_REPEATS):
            for name, client in zip(spent, clients):
                client.send(f"0 {end}")
                spent[name].append(client.result()["elapsed_s"])
        for name, seconds in spent.items():
            run.raw[TB][name].append(end / statistics.median(seconds) / 1e6)
    finally:
        raw_server.stop(0)
        run.release(*clients)
        run.workers.remove(raw_server)
