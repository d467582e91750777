"""Append and read throughput of the partition log against plain file I/O of the same bytes.

Workload (issue 1/7): 200-byte messages in batches of 50, flush policy of 10,000 messages. The
baseline writes the very same batch buffers with ``os.write`` to a new plain file (no fsync),
and reads them back with ``os.pread`` in 1 MiB chunks; the log's figures are ratios to it,
measured alternately in the same run, so the comparison holds on a noisy machine. Reads are
measured hot (the log that just appended, its boundary index in memory) and cold (the log
reopened, boundaries found by walking length fields).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from twisted_broker.storage.flusher import Flusher, InlineFlusher, ThreadFlusher
from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import ValidatedMessageSet, encode_message_set, validate_message_set

MESSAGE_BYTES = 200
BATCH = 50
FETCH_BYTES = 1 << 20


def _plain_write(path: str, batches: list[bytes]) -> float:
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    started = time.perf_counter()
    for batch in batches:
        os.write(fd, batch)
    elapsed = time.perf_counter() - started
    # Untimed: so that writing back these dirty pages does not slow the next measurement.
    os.fsync(fd)
    os.close(fd)
    return elapsed


def _plain_read(path: str) -> float:
    fd = os.open(path, os.O_RDONLY)
    started = time.perf_counter()
    position = 0
    while chunk := os.pread(fd, FETCH_BYTES, position):
        position += len(chunk)
    elapsed = time.perf_counter() - started
    os.close(fd)
    return elapsed


def _open_log(directory: str, flush_interval: int, flusher: Flusher | None = None) -> tuple[LogManager, Log]:
    manager = LogManager(directory, now=time.time, flusher=flusher,
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=flush_interval))
    manager.open()
    return manager, manager.get_or_create_log("bench", 0)


def _log_append(log: Log, validated: list[ValidatedMessageSet]) -> float:
    started = time.perf_counter()
    for messages in validated:
        log.append(messages)
    log.flush()  # the clock stops when every byte is durable, the last interval included
    return time.perf_counter() - started


def _log_read(log: Log, expected_bytes: int) -> float:
    started = time.perf_counter()
    offset = 0
    while (region := log.read(offset, FETCH_BYTES)) is not None:
        with region:
            offset += len(region.read())
    elapsed = time.perf_counter() - started
    assert offset == expected_bytes, (offset, expected_bytes)
    return elapsed


def _timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def run(messages: int = 1_000_000, flush_interval: int = 10_000, rounds: int = 3) -> dict:
    directory = tempfile.mkdtemp(prefix="tb-log-bench-", dir=os.environ.get("BENCH_DIR"))
    plain, logs = os.path.join(directory, "plain"), os.path.join(directory, "logs")
    try:
        # Distinct payloads per batch would only cost set-up time: the log never looks inside.
        batch = encode_message_set([os.urandom(MESSAGE_BYTES) for _ in range(BATCH)])
        batches = [batch] * (messages // BATCH)
        total_bytes = len(batch) * len(batches)
        validated = [validate_message_set(b) for b in batches]
        times: dict[str, list[float]] = {
            name: [] for name in ("write", "append", "inline", "validate", "pread", "hot", "cold")}
        # Alternate the baseline and the log, keeping each one's median, so drift hits both.
        for _ in range(rounds):
            times["write"].append(_plain_write(plain, batches))
            shutil.rmtree(logs, ignore_errors=True)
            manager, log = _open_log(logs, flush_interval, InlineFlusher())
            times["inline"].append(_log_append(log, validated))
            manager.close()
            shutil.rmtree(logs, ignore_errors=True)
            flusher = ThreadFlusher()  # as the broker runs it: fsyncs off the append path
            manager, log = _open_log(logs, flush_interval, flusher)
            times["append"].append(_log_append(log, validated))
            times["validate"].append(_timed(lambda: [validate_message_set(b, max_message_size=1_000_000) for b in batches]))
            times["pread"].append(_plain_read(plain))
            times["hot"].append(_log_read(log, total_bytes))
            manager.close()
            flusher.close()
            manager, log = _open_log(logs, flush_interval)
            times["cold"].append(_log_read(log, total_bytes))
            manager.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in times.items()}
    count = len(batches) * BATCH
    rows = [
        ("plain os.write, no fsync (baseline)", "write", "write"),
        (f"Log.append, fsync every {flush_interval:,}, flusher thread", "append", "write"),
        (f"Log.append, fsync every {flush_interval:,}, inline (0.7)", "inline", "write"),
        ("validate_message_set (produce check)", "validate", "write"),
        ("plain os.pread 1 MiB (baseline)", "pread", "pread"),
        ("Log.read 1 MiB + pread, hot index", "hot", "pread"),
        ("Log.read 1 MiB + pread, reopened log", "cold", "pread"),
    ]
    print(f"\nlog: {count:,} messages of {MESSAGE_BYTES} bytes in batches of {BATCH} "
          f"({total_bytes / 1e6:.0f} MB), median of {rounds} alternating rounds")
    print(f"{'':50} {'msgs/s':>12} {'MB/s':>9} {'vs baseline':>12}")
    results = {}
    for label, name, baseline in rows:
        seconds = median[name]
        ratio = median[baseline] / seconds
        print(f"{label:50} {count / seconds:12,.0f} {total_bytes / seconds / 1e6:9.0f} {ratio:11.2f}x")
        results[name] = {"msgs_per_s": count / seconds, "MB_per_s": total_bytes / seconds / 1e6,
                         "ratio_to_baseline": ratio}
    return results
