"""Asking a running broker, and waiting for it with a deadline instead of sleeping: a broker
flushes on a background thread, so what a test produced becomes visible a moment later.

The wire helpers (``offsets_result`` to ``fetch_all``) talk to a ``WireClient`` with requests
from the spec's own encoder (``spec_encoding``). The payload helpers (``produce_payloads`` to
``wait_for_payloads``), for the lifecycle and ZooKeeper tests, talk to a ``BrokerProcess``
through the broker's own codecs.
"""

from __future__ import annotations

import struct
import time

import pytest

from tests.support.spec_encoding import fetch, offsets
from twisted_broker.codec.kafka07.message_set import encode_message_set, iter_messages
from twisted_broker.codec.kafka07.requests import FetchRequest, OffsetRequest, ProduceRequest, encode_request
from twisted_broker.codec.kafka07.responses import decode_error_and_body
from twisted_broker.client.simple_consumer import SimpleConsumer


def wait_for(predicate, what: str, timeout_s: float = 10.0, interval_s: float = 0.05):
    """Poll ``predicate`` until it returns something truthy, and return that; fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


# --- over a WireClient, with the spec's encoder -------------------------------------------

def offsets_result(client, topic: str, partition: int = 0, time_ms: int = -1,
                   max_offsets: int = 1) -> list[int]:
    """The offsets an Offsets request answers (which must carry no error)."""
    body = client.request(offsets(topic, partition, time_ms, max_offsets))
    error, count = struct.unpack_from(">hi", body)
    assert error == 0
    assert len(body) == 6 + 8 * count
    return list(struct.unpack_from(f">{count}q", body, 6))


def latest_offset(client, topic: str, partition: int = 0) -> int:
    """The partition's visible end: Offsets(-1) with max 1, which answers exactly one offset."""
    found = offsets_result(client, topic, partition)
    assert len(found) == 1
    return found[0]


def wait_for_end(client, topic: str, end: int, partition: int = 0, timeout_s: float = 5.0) -> int:
    """Poll Offsets(-1) until the visible end reaches ``end``; return it (it may be larger)."""
    deadline = time.monotonic() + timeout_s
    while (latest := latest_offset(client, topic, partition)) < end:
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}-{partition} end stayed at {latest}, expected {end}")
        time.sleep(0.002)
    return latest


def fetch_all(client, topic: str, partition: int = 0, offset: int = 0) -> bytes:
    """The message bytes of one Fetch (up to 1 MiB) from ``offset``, which must carry no error."""
    body = client.request(fetch(topic, partition, offset))
    assert body[:2] == b"\x00\x00"
    return body[2:]


# --- over a BrokerProcess, with the broker's codecs ---------------------------------------

def produce_payloads(broker, topic: str, partition: int, payloads: list[bytes]) -> bytes:
    """Send one Produce (no response in 0.7); return the message set sent."""
    messages = encode_message_set(payloads)
    with broker.connect() as client:
        client.send(encode_request(ProduceRequest(topic, partition, messages)))
        # A second request on the same connection is answered only after the produce was
        # handled: one request at a time, in order.
        client.request(encode_request(OffsetRequest(topic, partition, -1, 1)))
    return messages


def fetch_payloads(broker, topic: str, partition: int) -> list[bytes]:
    with broker.connect() as client:
        error, body = decode_error_and_body(
            client.request(encode_request(FetchRequest(topic, partition, 0, 1 << 20))))
    assert error == 0
    return [bytes(message.payload) for _o, _n, message in iter_messages(body)]


def wait_for_payloads(broker, topic: str, partition: int, expected: list[bytes]) -> None:
    """Wait until a fetch from offset 0 returns ``expected`` (brokers flush on a thread)."""
    wait_for(lambda: fetch_payloads(broker, topic, partition) == expected,
             f"{expected} in {topic}-{partition}")


def consume(consumer: SimpleConsumer, topic: str, count: int, partition: int = 0, offset: int = 0,
            max_size: int = 1 << 20, timeout_s: float = 10.0) -> list[tuple[int, int, bytes]]:
    """``(offset, next_offset, payload)`` of the first ``count`` messages from ``offset``,
    fetching again until they are all visible (or failing at the deadline)."""
    found: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < count:
        fetched = consumer.fetch(FetchRequest(topic, partition, offset, max_size))
        found.extend((o, n, bytes(m.payload)) for o, n, m in fetched)
        offset = fetched.next_offset
        if len(found) < count:
            assert time.monotonic() < deadline, f"only {len(found)} of {count} messages became visible"
            time.sleep(0.02)
    return found
