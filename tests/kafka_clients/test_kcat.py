"""kcat (Debian's kafkacat, on librdkafka) against the modern listener: it lists the broker
(after its ApiVersions v3 is answered with error 35 and it falls back), produces keyed records
with headers under every compression, reads another client's timestamps, starts at a time."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.support.kafka_clients import client_kafka_python
from tests.support.kafka_clients.records import Consumed, Record, assert_same_records, sample_records

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
READ = (FETCH, LIST_OFFSETS, METADATA)
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
HEADERS = (("source", b"kcat"), ("kind", b"test"))


def kcat_run(*args: str, stdin: str | None = None, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"kcat {' '.join(args)} exited with {done.returncode}: {done.stderr[-3000:]}"
    return done


def kcat(*args: str, stdin: str | None = None, timeout_s: float = 30.0) -> str:
    return kcat_run(*args, stdin=stdin, timeout_s=timeout_s).stdout


def read(bootstrap: str, topic: str, *, start: str = "beginning", count: int | None = None) -> list[Consumed]:
    """Records of partition 0 from ``start`` to the end (kcat -e), from kcat's JSON envelopes."""
    args = ["-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", start, "-e", "-J", "-q"]
    if count is not None:
        args += ["-c", str(count)]
    found = []
    for line in kcat(*args).splitlines():
        envelope = json.loads(line)
        flat = envelope.get("headers") or []
        headers = tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2))
        key = envelope["key"]
        found.append(Consumed(envelope["partition"], envelope["offset"], Record(
            None if key is None else key.encode(), envelope["payload"].encode(), headers, envelope["ts"])))
    return found


@pytest.mark.needs_api(METADATA, API_VERSIONS)
def test_kcat_falls_back_from_apiversions_v3_and_lists_the_broker_by_its_id_and_kafka_port(modern_broker):
    done = kcat_run("-b", modern_broker.bootstrap, "-L", "-J", "-d", "protocol")
    # librdkafka's own account of the fallback, as against Kafka 2.1
    assert "ApiVersionRequest v3 failed due to UNSUPPORTED_VERSION: retrying with v0" in done.stderr
    listing = json.loads(done.stdout)
    assert [(b["id"], b["name"]) for b in listing["brokers"]] == [(0, modern_broker.bootstrap)]
    assert listing["controllerid"] == 0


@pytest.mark.needs_api(PRODUCE, *READ)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kcat_produces_and_reads_keys_and_headers(modern_broker, topic, compression):
    lines = [f"key-{i}|{compression} value {i} " * 4 for i in range(20)]
    before_ms = int(time.time() * 1000)
    kcat("-b", modern_broker.bootstrap, "-P", "-t", topic, "-p", "0", "-z", compression, "-K", "|",
         *(arg for name, value in HEADERS for arg in ("-H", f"{name}={value.decode()}")),
         stdin="\n".join(lines) + "\n")
    after_ms = int(time.time() * 1000)
    consumed = read(modern_broker.bootstrap, topic)
    keys_values = [line.split("|", 1) for line in lines]
    assert [(c.record.key, c.record.value) for c in consumed] == [(k.encode(), v.encode()) for k, v in keys_values]
    assert all(c.record.headers == HEADERS for c in consumed)
    # librdkafka stamps its create time
    assert all(before_ms - 1000 <= c.record.timestamp_ms <= after_ms + 1000 for c in consumed)
    offsets = [c.offset for c in consumed]
    assert offsets == sorted(set(offsets))


@pytest.mark.needs_api(PRODUCE, *READ)
def test_kcat_reads_another_clients_keys_headers_and_timestamps(modern_broker, topic):
    sent = sample_records(20, "for-kcat")
    client_kafka_python.produce(modern_broker.bootstrap, topic, sent, compression="zstd")
    assert_same_records(sent, read(modern_broker.bootstrap, topic))


@pytest.mark.needs_api(PRODUCE, *READ)
def test_kcat_starts_at_the_first_record_at_or_after_a_time(modern_broker, topic):
    sent = sample_records(10, "kcat-time")
    offsets = [o for _, o in client_kafka_python.produce(modern_broker.bootstrap, topic, sent)]
    [first] = read(modern_broker.bootstrap, topic, start=f"s@{sent[4].timestamp_ms - 1}", count=1)
    assert (first.offset, first.record) == (offsets[4], sent[4])
