"""The broker's bounds on hostile peers, pinned on the protocol in process (no sockets):
KafkaServerProtocol on StringTransports with a task.Clock, over a real Broker and LogManager.

- big partial requests reserve their size from the shared RequestBudget, wait in order when it
  is spent, and a reserved request that stalls closes its connection;
- small responses are paced: after PACE_BYTES the connection waits for the transport to drain;
- the regions of one response share one descriptor per segment;
- hypothesis: no sequence of generated and mutated frames, cut at any points, makes the
  protocol raise, and nothing invalid reaches the log.
"""

from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import pytest

from tests.support.spec_encoding import fetch, message_set_of, multifetch, offsets, produce
from tests.support.reliability import current_scale, record
from tests.support.faults.fuzz_frames import FrameFuzzer
from tests.support.faults.oracle import appendable_prefix, deep_valid, frames_of, produced_sets, walk
from twisted_broker.network.connection import PACE_BYTES, REQUESTS_PER_TURN
from twisted_broker.network.request_budget import SMALL_REQUEST_BYTES, STALLED_REQUEST_S
from twisted_broker.network.kafka07 import KafkaServerFactory
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager

MAX_REQUEST = 10 << 20


@pytest.fixture
def logs(tmp_path):
    manager = LogManager(str(tmp_path / "logs"), now=lambda: 1_000_000.0, partitions_for=lambda topic: 2,
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=1, file_size=1 << 20),
                         flusher=InlineFlusher())
    manager.open()
    yield manager
    manager.close()


@pytest.fixture
def factory(logs):
    broker = Broker(logs, BrokerStats(RequestStats(600, lambda: 1_000_000.0)), max_message_size=2 << 20)
    clock = Clock()
    made = KafkaServerFactory(broker, max_request_size=MAX_REQUEST, max_buffered_request_bytes=(5 << 20) // 2,
                              clock=clock)
    made.clock = clock
    return made


def connect(factory):
    transport = StringTransport()
    protocol = factory.buildProtocol(None)
    protocol.makeConnection(transport)
    return transport, protocol


def pump(clock: Clock, turns: int = 100_000) -> None:
    """Run the turns a protocol yields to the reactor (REQUESTS_PER_TURN) until none is due."""
    while clock.getDelayedCalls() and turns:
        clock.advance(0)
        turns -= 1


def big_produce(topic: str, size: int) -> bytes:
    payload_bytes = size - len(produce(topic, 0, message_set_of(b"")))
    return produce(topic, 0, message_set_of(b"x" * payload_bytes))


def test_big_partial_requests_wait_for_the_budget_and_are_admitted_in_order(factory, logs):
    frames = [big_produce(f"b{i}", (1 << 20) + i) for i in range(4)]
    connections = [connect(factory) for _ in frames]
    for (transport, protocol), frame in zip(connections, frames):
        protocol.dataReceived(frame[:200_000])
    # 2.5 MiB of budget: the first two 1 MiB requests (plus headers) are admitted, not the others.
    states = [transport.producerState for transport, _ in connections]
    assert states == ["producing", "producing", "paused", "paused"]
    assert factory.budget.waiting == 2
    small = connect(factory)  # small requests never wait
    small[1].dataReceived(fetch("b0"))
    assert small[0].value() == struct.pack(">ih", 2, 0)
    (transport, protocol), frame = connections[0], frames[0]
    protocol.dataReceived(frame[200_000:])  # completes, is appended, frees its reservation
    assert logs.get_log("b0", 0).end_offset > 0
    assert [t.producerState for t, _ in connections] == ["producing", "producing", "producing", "paused"]
    connections[1][1].connectionLost(None)  # a waiting slot is also freed by a disconnect
    assert connections[3][0].producerState == "producing"
    for (transport, protocol), frame in zip(connections[2:], frames[2:]):
        protocol.dataReceived(frame[200_000:])
    assert factory.budget.reserved_bytes == 0 and factory.budget.waiting == 0
    assert [logs.get_log(f"b{i}", 0) is not None for i in range(4)] == [True, False, True, True]


def test_a_reserved_request_that_stalls_closes_its_connection_and_frees_the_budget(factory):
    hog_transport, hog = connect(factory)
    hog.dataReceived(big_produce("hog", 3 << 20)[:100_000])
    waiter_transport, waiter = connect(factory)
    waiter.dataReceived(big_produce("next", 1 << 20)[:100_000])
    assert waiter_transport.producerState == "paused"
    factory.clock.advance(STALLED_REQUEST_S - 1)
    hog.dataReceived(b"\x00" * 1000)  # progress resets the timer
    factory.clock.advance(STALLED_REQUEST_S - 1)
    assert not hog_transport.disconnecting
    factory.clock.advance(2)
    assert hog_transport.disconnecting
    hog.connectionLost(None)
    assert waiter_transport.producerState == "producing"
    assert not waiter_transport.disconnecting


def test_requests_up_to_the_small_size_never_reserve(factory):
    transport, protocol = connect(factory)
    protocol.dataReceived(big_produce("s", SMALL_REQUEST_BYTES)[:-1])
    assert factory.budget.reserved_bytes == 0


def test_small_responses_wait_for_the_transport_after_pace_bytes(factory, logs):
    transport, protocol = connect(factory)
    protocol.dataReceived(produce("p", 0, message_set_of(b"one")))
    answer = 18  # an offsets answer: size, error, count, one offset
    requests = offsets("p") * (PACE_BYTES // answer + 100)
    protocol.dataReceived(requests)
    assert len(transport.value()) == REQUESTS_PER_TURN * answer  # then the others get a turn
    pump(factory.clock)
    written = len(transport.value())
    assert PACE_BYTES <= written < PACE_BYTES + answer + 1  # then it waits for the peer
    assert transport.producer is not None  # the drain waiter
    protocol.dataReceived(offsets("p"))  # a peer that keeps sending is not read from
    assert transport.producerState == "paused"
    transport.producer.resumeProducing()  # first call: armed (registerProducer's own call on TCP)
    transport.producer.resumeProducing()  # the transport drained
    pump(factory.clock)
    assert len(transport.value()) == (PACE_BYTES // answer + 101) * answer
    assert transport.producerState == "producing"


def _descriptors_open_on(directory) -> int:
    """This process's descriptors open on files under ``directory`` (other tests' objects,
    closed by the garbage collector at any moment, must not shift the count)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory))
        except OSError:
            pass  # closed meanwhile
    return count


def test_regions_of_one_segment_in_one_response_share_a_descriptor(factory, logs, tmp_path):
    transport, protocol = connect(factory)
    protocol.dataReceived(produce("fd", 0, message_set_of(b"data")))
    log_dir = logs.log_dir
    before = _descriptors_open_on(log_dir)
    protocol.dataReceived(multifetch(*[("fd", 0, 0, 1000)] * 5000))
    assert _descriptors_open_on(log_dir) == before + 1
    while transport.producer is not None:
        transport.producer.resumeProducing()
    assert _descriptors_open_on(log_dir) == before


_fuzz_seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=current_scale().protocol_examples, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=_fuzz_seeds, cuts=st.lists(st.integers(0, 4096), max_size=8))
def test_generated_frames_cut_anywhere_never_raise_nor_reach_the_log_invalid(factory, logs, request, seed, cuts):
    fuzzer = FrameFuzzer(seed, max_request_bytes=MAX_REQUEST)
    data = b"".join(frame for _ in range(3) for frame in fuzzer.case())
    allowed = {entry.raw for frame in frames_of(data) for message_set in produced_sets(frame)
               for entry in walk(appendable_prefix(message_set))[0]}
    before = {log.name: sum(s.size for s in log.segments) for log in logs.logs()}
    transport, protocol = connect(factory)
    position = 0
    for cut in sorted(cuts) + [len(data)]:  # the same bytes, split at arbitrary points
        if transport.disconnecting:
            break
        protocol.dataReceived(data[position:cut])
        position = max(position, cut)
        steps = 0
        while (transport.producer is not None or factory.clock.getDelayedCalls()) and steps < 100_000 \
                and not transport.disconnecting:
            if transport.producer is not None:
                transport.producer.resumeProducing()
            factory.clock.advance(0)
            steps += 1
    protocol.connectionLost(None)
    if transport.producer is not None:
        transport.producer.stopProducing()
    for log in logs.logs():
        start = before.get(log.name, 0)
        for segment in log.segments:
            with open(segment.path, "rb") as file:
                file.seek(max(start - segment.start, 0))
                new = file.read()
            entries, _valid, problem = walk(new)
            assert problem is None, (seed, problem)
            for entry in entries:
                assert entry.raw in allowed and deep_valid(entry), seed
    record(request, cases_tried=len(frames_of(data)) or 1)
