"""Produce, Fetch and ListOffsets through KafkaModernProtocol on StringTransports, over a real
LogManager in tmp_path whose flushes are inline (a produce is visible at once), with a
task.Clock for the fetches' long-poll."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from tests.support.string_peer import Peer
from twisted_broker.config import BrokerConfig
from twisted_broker.coordinator.group.offset_store import FileOffsets
from twisted_broker.coordinator.producer.producer_ids import FileProducerIds
from twisted_broker.codec.kafka.api_keys import FETCH, LIST_OFFSETS, PRODUCE
from twisted_broker.codec.kafka.protocol import decode_response, encode_request
from twisted_broker.codec.kafka.record_batch import build_batch, decode_batch, split_batches
from twisted_broker.network.kafka import KafkaModernFactory
from twisted_broker.handlers.kafka.table import modern_broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import encode_message_set, iter_messages
from tests.support.manual_flusher import ManualFlusher

T0 = 1_700_000_000_000


@pytest.fixture
def setup(tmp_path):
    yield from listener(tmp_path, LogPolicy(flush_interval_messages=1), InlineFlusher())


@pytest.fixture
def by_time(tmp_path):
    """make run's flush policy: an fsync every 10,000 messages or second, in the fsync process."""
    flusher = ManualFlusher()
    for factory, logs, clock in listener(tmp_path, LogPolicy(flush_interval_messages=10_000), flusher):
        yield factory, logs, clock, flusher
        flusher.run_all()
        flusher.inline = True


def listener(tmp_path, policy, flusher):
    config = BrokerConfig(brokerid=0, log_dir=str(tmp_path / "logs"), enable_zookeeper=False,
                          kafka_max_batch_bytes=4096)
    logs = LogManager(config.log_dir, now=lambda: 1000.0, partitions_for=config.partitions_for,
                      policy_for=lambda topic: policy, flusher=flusher)
    logs.open()
    logs.get_or_create_log("a", 0)  # produce writes to existing topics; Metadata creates them (Kafka's rule)
    clock = Clock()
    broker = modern_broker(config, logs, BrokerStats(RequestStats(60, clock.seconds)), port=lambda: 9094,
                           clock=clock, offsets=FileOffsets(config.log_dir),
                           producer_ids=FileProducerIds(config.log_dir, config.brokerid))
    yield KafkaModernFactory(broker, max_request_size=1 << 20, clock=clock), logs, clock
    logs.close()


def produce(peer: Peer, records: bytes, acks: int = 1, topic: str = "a", correlation_id: int = 1) -> dict | None:
    peer.send(encode_request(PRODUCE, 3, correlation_id, "t", {
        "acks": acks, "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}))
    frames = peer.responses()
    if not frames:
        return None
    return decode_response(PRODUCE, 3, frames[0])[1]["responses"][0]["partition_responses"][0]


def fetch_request(offset: int, max_wait_ms: int = 0, correlation_id: int = 2) -> bytes:
    return encode_request(FETCH, 4, correlation_id, "t", {
        "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": "a", "partitions": [{"partition": 0, "fetch_offset": offset,
                                                  "partition_max_bytes": 1 << 20}]}]})


def fetched(peer: Peer) -> list[dict]:
    while peer.transport.producer is not None:  # fetched regions stream through the chunked producer
        peer.transport.producer.resumeProducing()
    return [decode_response(FETCH, 4, frame)[1]["responses"][0]["partitions"][0] for frame in peer.responses()]


def test_a_produced_batch_is_fetched_as_sent_with_its_base_offset_and_high_watermark(setup):
    factory, logs, _clock = setup
    peer = Peer(factory)
    batch = build_batch([(T0, b"k1", b"v1", [("h", b"1")]), (T0 + 1, None, b"v2", [])])
    answer = produce(peer, batch)
    assert (answer["error_code"], answer["base_offset"]) == (0, 0)
    second = produce(peer, build_batch([(T0 + 2, b"k3", b"v3")]))
    peer.send(fetch_request(0))
    [partition] = fetched(peer)
    assert partition["error_code"] == 0
    header, records = decode_batch(split_batches(partition["records"])[0])
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [(0, b"k1", b"v1", T0), (1, None, b"v2", T0 + 1)]
    [(_h, [third])] = [decode_batch(b) for b in split_batches(partition["records"])[1:]]
    assert third.offset == second["base_offset"] > 1
    assert partition["high_watermark"] == third.offset + 1


def test_a_0_7_reader_sees_one_message_per_record_value(setup):
    factory, logs, _clock = setup
    produce(Peer(factory), build_batch([(T0, b"k", b"one"), (T0, b"k", None), (T0, None, b"three")]))
    with logs.get_log("a", 0).read(0, 1 << 20) as region:
        stored = region.read()
    assert [bytes(m.payload) for _o, _n, m in iter_messages(stored)] == [b"one", b"", b"three"]


def test_a_0_7_message_set_is_served_as_magic_1_messages_with_offsets(setup):
    factory, logs, _clock = setup
    from twisted_broker.codec.kafka07.message_set import validate_message_set

    logs.get_or_create_log("a", 0).append(validate_message_set(encode_message_set([b"old", b"older"])))
    peer = Peer(factory)
    peer.send(fetch_request(0))
    [partition] = fetched(peer)
    from twisted_broker.codec.kafka.legacy_sets import decode_legacy_set

    assert [(r.magic, r.key, r.value) for r in decode_legacy_set(partition["records"])] == [
        (1, None, b"old"), (1, None, b"older")]
    assert partition["high_watermark"] == 14  # "old" takes 13 bytes: "older", at byte 13, is offset 13


def test_a_fetch_at_the_end_waits_for_new_data_then_answers(setup):
    factory, _logs, clock = setup
    reader, writer = Peer(factory), Peer(factory)
    produce(writer, build_batch([(T0, None, b"first")]))
    end = 1
    reader.send(fetch_request(end, max_wait_ms=500))
    clock.advance(0.1)
    assert reader.responses() == []  # held: nothing new yet
    produce(writer, build_batch([(T0, None, b"second")]))
    clock.advance(0)  # the flush published: answered on the next reactor step
    [partition] = fetched(reader)
    [(_header, [record])] = [decode_batch(b) for b in split_batches(partition["records"])]
    assert record.value == b"second"


def test_under_a_flush_policy_by_time_a_waiting_fetch_has_its_flush_at_once_and_its_answer_with_it(by_time):
    factory, logs, clock, flusher = by_time
    reader, writer = Peer(factory), Peer(factory)
    produce(writer, build_batch([(T0, None, b"first")]))
    logs.get_log("a", 0).start_flush()
    flusher.run_all()
    reader.send(fetch_request(1, max_wait_ms=500))
    assert reader.responses() == [] and len(flusher.jobs) == 1
    produce(writer, build_batch([(T0, None, b"second")]))
    assert len(flusher.jobs) == 2  # asked for at once: the policy alone waits up to a second
    flusher.run_all()  # the fsync process's reply: answered there, no reactor step between
    [partition] = fetched(reader)
    [(_header, [record])] = [decode_batch(b) for b in split_batches(partition["records"])]
    assert record.value == b"second"


def test_a_fetch_at_the_end_that_does_not_wait_asks_for_the_flush_of_what_is_written(by_time):
    factory, logs, _clock, flusher = by_time
    reader = Peer(factory)
    produce(reader, build_batch([(T0, None, b"first")]))
    assert flusher.jobs == []
    reader.send(fetch_request(0))
    assert fetched(reader)[0]["records"] == b""
    assert len(flusher.jobs) == 1
    flusher.run_all()
    assert logs.get_log("a", 0).end_offset > 0


def test_a_fetch_with_nothing_new_is_answered_empty_after_max_wait(setup):
    factory, _logs, clock = setup
    reader = Peer(factory)
    produce(reader, build_batch([(T0, None, b"first")]))
    reader.send(fetch_request(1, max_wait_ms=500))
    clock.advance(0.499)
    assert reader.responses() == []
    clock.advance(0.001)
    [partition] = fetched(reader)
    assert (partition["error_code"], partition["records"], partition["high_watermark"]) == (0, b"", 1)


def test_offsets_out_of_range_and_list_offsets(setup):
    factory, _logs, _clock = setup
    peer = Peer(factory)
    produce(peer, build_batch([(T0 + i, None, b"x") for i in range(3)]))
    peer.send(fetch_request(99))
    assert fetched(peer)[0]["error_code"] == 1
    peer.send(encode_request(LIST_OFFSETS, 1, 5, "t", {"topics": [{"name": "a", "partitions": [
        {"partition_index": 0, "timestamp": t} for t in (-1, -2, T0 + 1, T0 + 9)]}]}))
    [frame] = peer.responses()
    partitions = decode_response(LIST_OFFSETS, 1, frame)[1]["topics"][0]["partitions"]
    assert [(p["offset"], p["timestamp"]) for p in partitions] == [(3, -1), (0, -1), (1, T0 + 1), (-1, -1)]


@pytest.mark.parametrize("records, code", [
    (b"\x00" * 70, 2),                                                 # not a batch: corrupt
    (bytearray(build_batch([(T0, None, b"x")]))[:-1] + b"?", 2),       # bad CRC32C
    (build_batch([(T0, None, b"x" * 5000)]), 10),                      # over kafka.max.batch.bytes
])
def test_bad_records_get_their_error_and_nothing_is_stored(setup, records, code):
    factory, logs, _clock = setup
    peer = Peer(factory)
    assert produce(peer, bytes(records))["error_code"] == code
    assert logs.get_log("a", 0).written_end == 0
    assert produce(peer, build_batch([(T0, None, b"ok")]))["error_code"] == 0  # the connection serves on


def test_acks_0_gets_no_answer_but_is_stored(setup):
    factory, logs, _clock = setup
    peer = Peer(factory)
    assert produce(peer, build_batch([(T0, None, b"quiet")]), acks=0) is None
    assert logs.get_log("a", 0).written_end > 0
