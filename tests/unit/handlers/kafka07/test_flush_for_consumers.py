"""make run's flush policy (an fsync every 10,000 messages or second) with consumers at the
end: the flush they wait for is asked for at once, and a held fetch is answered where the
flush's result is published, in the same reactor turn (handlers/held_fetch.py)."""

from __future__ import annotations

import struct

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest, ProduceRequest, encode_request
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.network.kafka07 import KafkaServerProtocol
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from tests.support.manual_flusher import ManualFlusher

MESSAGES = encode_message_set([b"hello"])
EMPTY_FETCH_RESPONSE = struct.pack(">ih", 2, 0)


@pytest.fixture
def flusher() -> ManualFlusher:
    return ManualFlusher()


@pytest.fixture
def broker(tmp_path, flusher):
    clock = Clock()
    logs = LogManager(str(tmp_path / "logs"), now=clock.seconds,
                      policy_for=lambda topic: LogPolicy(flush_interval_messages=10_000, flush_interval_ms=1000),
                      flusher=flusher)
    logs.open()
    yield Broker(logs, BrokerStats(RequestStats(600, clock.seconds)))
    flusher.run_all()
    flusher.inline = True
    logs.close()


def connect(broker, clock, wait_ms):
    transport = StringTransport()
    protocol = KafkaServerProtocol(broker, max_request_size=1 << 20, clock=clock, fetch_wait_max_ms=wait_ms)
    protocol.makeConnection(transport)
    return transport, protocol


def produce() -> bytes:
    return encode_request(ProduceRequest("a", 0, MESSAGES))


def fetch(offset: int) -> bytes:
    return encode_request(FetchRequest("a", 0, offset, 4096))


def flushed_log(broker, flusher):
    """The log of a-0, everything in it flushed and published."""
    log = broker.logs.get_log("a", 0)
    log.start_flush()
    flusher.run_all()
    return log


def test_a_held_fetch_has_its_flush_at_once_and_is_answered_where_the_flush_is_published(broker, flusher):
    clock = Clock()
    _, producer = connect(broker, clock, 0)
    producer.dataReceived(produce())
    end = flushed_log(broker, flusher).end_offset
    transport, consumer = connect(broker, clock, 500)
    consumer.dataReceived(fetch(end))
    assert transport.value() == b"" and len(flusher.jobs) == 1
    producer.dataReceived(produce())
    assert len(flusher.jobs) == 2  # asked for at once: the policy alone would wait 10,000 or 1 s
    job = flusher.jobs[-1]
    job.run()
    job.log.publish_flushed()  # the fsync process's reply
    # Answered there and then: no reactor step between (ChunkedFileProducer, StringTransport).
    transport.producer.resumeProducing()
    assert transport.value() == struct.pack(">ih", 2 + len(MESSAGES), 0) + MESSAGES
    assert clock.getDelayedCalls() == []


def test_an_empty_fetch_at_the_end_asks_for_the_flush_of_what_is_written(broker, flusher):
    clock = Clock()
    _, producer = connect(broker, clock, 0)
    producer.dataReceived(produce())
    assert flusher.jobs == []  # the policy's count is far off
    transport, consumer = connect(broker, clock, 0)  # fetch.wait.max.ms=0: answered at once
    consumer.dataReceived(fetch(0))
    assert transport.value() == EMPTY_FETCH_RESPONSE
    assert len(flusher.jobs) == 1
    flusher.run_all()
    assert broker.logs.get_log("a", 0).end_offset == len(MESSAGES)


def test_a_fetch_with_data_to_send_asks_for_no_flush(broker, flusher):
    clock = Clock()
    _, producer = connect(broker, clock, 0)
    producer.dataReceived(produce())
    flushed_log(broker, flusher)
    producer.dataReceived(produce())
    jobs = len(flusher.jobs)
    transport, consumer = connect(broker, clock, 0)
    consumer.dataReceived(fetch(0))
    assert len(flusher.jobs) == jobs
