"""Every Kafka 0.7 request type over a real socket, pinned by the golden bytes of spec section 7.

The golden tests run against a broker of their own (the vectors all use topic ``test``); the
fetch and offsets semantics share one broker per module, each test on topics of its own.
Flushes run on a background thread, so a produce becomes visible a moment later: tests poll
Offsets(-1) (``wait_for_end``) instead of sleeping.
"""

from __future__ import annotations

import struct
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.polling import offsets_result, wait_for_end
from tests.support.spec_encoding import fetch, message, message_set, multifetch, multiproduce, produce
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY, decompress
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set


def h(text: str) -> bytes:
    """Golden bytes as the spec writes them: hex with spaces and ``|`` between fields."""
    return bytes.fromhex(text.replace("|", "").replace(" ", ""))


# --- spec section 7 ------------------------------------------------------------------------
V1_SET = h("0000000b 01 00 3610a686 68656c6c6f")
V2_PRODUCE = h("0000001f 0000 0004 74657374 00000000 0000000f 0000000b01003610a68668656c6c6f")
V3_FETCH = h("00000018 0001 0004 74657374 00000000 0000000000000000 00100000")
V4_FETCH_RESPONSE = h("00000011 0000 0000000b01003610a68668656c6c6f")
V5_OFFSETS = h("00000018 0004 0004 74657374 00000000 ffffffffffffffff 00000001")
V5_OFFSETS_RESPONSE = h("0000000e 0000 00000001 000000000000000f")
V6_MULTIFETCH = h("00000030 0002 0002 00047465737400000000000000000000000000100000 "
                  "00047465737400000001000000000000000000100000")
V6_MULTIFETCH_RESPONSE = h("0000001d 0000 | 00000011 0000 0000000b01003610a68668656c6c6f | 00000002 0000")
V7_MULTIPRODUCE = h("0000003e 0003 0002 000474657374000000000000000f0000000b01003610a68668656c6c6f "
                    "000474657374000000010000000f0000000b01003610a68668656c6c6f")
EMPTY_FETCH_RESPONSE = h("00000002 0000")

NO_ERROR, UNKNOWN, OFFSET_OUT_OF_RANGE, WRONG_PARTITION, INVALID_FETCH_SIZE = 0, -1, 1, 3, 4


# --- helpers ------------------------------------------------------------------------------

def raw_response(client) -> bytes:
    """One whole response as sent, size field included."""
    size = client.read_exactly(4)
    return size + client.read_exactly(struct.unpack(">i", size)[0])


def fetch_result(client, topic: str, partition: int = 0, offset: int = 0,
                 max_size: int = 1 << 20) -> tuple[int, bytes]:
    body = client.request(fetch(topic, partition, offset, max_size))
    return struct.unpack_from(">h", body)[0], body[2:]


def produced(client, topic: str, messages: bytes, partition: int = 0, start: int = 0) -> int:
    """Produce ``messages`` and wait until they are visible; return the new end offset."""
    client.send(produce(topic, partition, messages))
    end = start + len(messages)
    assert wait_for_end(client, topic, end, partition) == end
    return end


# --- fixtures -----------------------------------------------------------------------------

@pytest.fixture
def golden_broker(broker_factory) -> BrokerProcess:
    """A fresh broker (topic ``test`` is new) with two partitions per topic, as V6 and V7 need."""
    return broker_factory("golden", properties={"num.partitions": "2"})


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the semantic tests: 2 partitions per topic, 4 for topic ``spread``."""
    broker = BrokerProcess(tmp_path_factory.mktemp("wire"), properties={
        "num.partitions": "2", "topic.partition.count.map": "spread:4"}).start()
    yield broker
    broker.kill()


@pytest.fixture
def client(shared_broker):
    with shared_broker.connect() as connection:
        yield connection


# --- golden vectors -----------------------------------------------------------------------

def test_golden_produce_then_fetch_answers_v4_exactly(golden_broker):
    with golden_broker.connect() as client:
        client.send(V2_PRODUCE)
        deadline = time.monotonic() + 5
        while True:  # empty (error 0) until the background flush makes V1 visible
            client.send(V3_FETCH)
            answer = raw_response(client)
            if answer != EMPTY_FETCH_RESPONSE or time.monotonic() > deadline:
                break
            time.sleep(0.002)
        assert answer == V4_FETCH_RESPONSE


def test_golden_offsets_after_produce_answers_v5_exactly(golden_broker):
    with golden_broker.connect() as client:
        client.send(V2_PRODUCE)
        wait_for_end(client, "test", 15)
        client.send(V5_OFFSETS)
        assert raw_response(client) == V5_OFFSETS_RESPONSE


def test_golden_multifetch_with_empty_second_partition_answers_v6_exactly(golden_broker):
    with golden_broker.connect() as client:
        client.send(V2_PRODUCE)
        wait_for_end(client, "test", 15)
        client.send(V6_MULTIFETCH)
        assert raw_response(client) == V6_MULTIFETCH_RESPONSE


def test_golden_multiproduce_appends_v1_to_both_partitions(golden_broker):
    with golden_broker.connect() as client:
        client.send(V7_MULTIPRODUCE)
        for partition in (0, 1):
            assert wait_for_end(client, "test", 15, partition) == 15
            client.send(fetch("test", partition))
            assert raw_response(client) == V4_FETCH_RESPONSE


# --- produce ------------------------------------------------------------------------------

def test_produce_to_partition_minus_one_spreads_over_valid_partitions(shared_broker, client):
    count = 64
    sets = [message_set(message(b"spread-%03d" % i)) for i in range(count)]
    for entry in sets:
        client.send(produce("spread", -1, entry))
    total = sum(map(len, sets))
    deadline = time.monotonic() + 5
    while sum(offsets_result(client, "spread", p)[0] for p in range(4)) < total:
        assert time.monotonic() < deadline, "not every produce to partition -1 became visible"
        time.sleep(0.002)
    entries, used = [], set()
    for partition in range(4):
        error, data = fetch_result(client, "spread", partition)
        assert error == NO_ERROR
        entries += [data[i:i + len(sets[0])] for i in range(0, len(data), len(sets[0]))]
        if data:
            used.add(partition)
    assert sorted(entries) == sorted(sets)  # each message landed exactly once
    assert len(used) > 1
    assert sorted(p.name for p in shared_broker.log_dir.iterdir() if p.name.startswith("spread-")) == [
        "spread-0", "spread-1", "spread-2", "spread-3"]


def test_multiproduce_appends_each_part_to_its_own_topic_and_partition(client):
    parts = [("mp-x", 0, message_set(message(b"x0"))), ("mp-y", 1, message_set(message(b"y1"))),
             ("mp-x", 1, message_set(message(b"x1"))), ("mp-x", 0, message_set(message(b"x0 again")))]
    client.send(multiproduce(*parts))
    expected = {("mp-x", 0): parts[0][2] + parts[3][2], ("mp-y", 1): parts[1][2], ("mp-x", 1): parts[2][2]}
    for (topic, partition), data in expected.items():
        assert wait_for_end(client, topic, len(data), partition) == len(data)
        assert fetch_result(client, topic, partition) == (NO_ERROR, data)


def test_magic_0_and_magic_1_messages_are_fetched_back_byte_exact(client):
    sent = message_set(message(b"zero", magic=0), message(b"one", magic=1), message(b"", magic=0))
    produced(client, "magics", sent)
    assert fetch_result(client, "magics") == (NO_ERROR, sent)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY], ids=["gzip", "snappy"])
def test_compressed_wrapper_is_stored_and_fetched_verbatim(client, codec):
    payloads = [b"first", b"second" * 50, b"third"]
    sent = encode_compressed_message_set(payloads, codec)
    topic = f"compressed-{codec}"
    produced(client, topic, sent)
    error, data = fetch_result(client, topic)
    assert (error, data) == (NO_ERROR, sent)
    assert data[5] & 3 == codec  # one wrapper entry, its codec as sent
    assert decompress(codec, data[10:]) == message_set(*(message(p) for p in payloads))


# --- fetch --------------------------------------------------------------------------------

def test_fetch_at_end_offset_returns_empty_set_without_error(client):
    end = produced(client, "at-end", message_set(message(b"a"), message(b"b")))
    client.send(fetch("at-end", offset=end))
    assert raw_response(client) == EMPTY_FETCH_RESPONSE


@pytest.mark.parametrize("where", ["before-first", "after-end"])
def test_fetch_outside_the_log_is_offset_out_of_range(client, where):
    topic = f"out-of-range-{where}"
    end = produced(client, topic, message_set(message(b"x")))
    offset = -1 if where == "before-first" else end + 1
    client.send(fetch(topic, offset=offset))
    assert raw_response(client) == h("00000002 0001")


@pytest.mark.parametrize("partition", [2, 100, -1, -2147483648])
def test_fetch_of_partition_outside_the_topic_is_wrong_partition(client, partition):
    assert fetch_result(client, "two-partitions", partition) == (WRONG_PARTITION, b"")


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "", "bad\x01name"])
def test_fetch_of_invalid_topic_name_is_unknown_error(client, topic):
    client.send(fetch(topic, 0, 0, 1024))
    assert raw_response(client) == h("00000002 ffff")


def test_fetch_of_never_produced_topic_is_empty_without_error(shared_broker, client):
    client.send(fetch("never-produced", 1, 0))
    assert raw_response(client) == EMPTY_FETCH_RESPONSE
    assert not (shared_broker.log_dir / "never-produced-1").exists()  # a fetch creates no log


def test_fetch_with_negative_max_size_is_invalid_fetch_size_and_connection_stays_usable(client):
    sent = message_set(message(b"payload"))
    produced(client, "negative-size", sent)
    assert fetch_result(client, "negative-size", max_size=-1) == (INVALID_FETCH_SIZE, b"")
    assert fetch_result(client, "negative-size") == (NO_ERROR, sent)


def test_fetch_smaller_than_first_message_returns_raw_prefix_of_max_size(client):
    sent = message_set(message(b"m" * 100), message(b"n"))
    produced(client, "too-small", sent)
    error, data = fetch_result(client, "too-small", max_size=20)
    assert (error, data) == (NO_ERROR, sent[:20])
    (length,) = struct.unpack_from(">i", data)
    assert length > len(data) - 4  # how a client detects that its fetch size is too small


def test_fetch_response_is_cut_at_last_whole_message_within_max_size(client):
    entries = [message_set(message(b"%d" % i * 10)) for i in range(5)]  # 20 bytes each
    sent = b"".join(entries)
    produced(client, "cut", sent)
    assert fetch_result(client, "cut", max_size=59) == (NO_ERROR, sent[:40])
    assert fetch_result(client, "cut", max_size=60) == (NO_ERROR, sent[:60])
    assert fetch_result(client, "cut", offset=20, max_size=45) == (NO_ERROR, sent[20:60])
    assert fetch_result(client, "cut", offset=80, max_size=1000) == (NO_ERROR, sent[80:])


def test_fetch_with_zero_max_size_returns_empty_set(client):
    produced(client, "zero-size", message_set(message(b"x")))
    assert fetch_result(client, "zero-size", max_size=0) == (NO_ERROR, b"")


def test_multifetch_outer_error_is_zero_with_an_error_per_part(client):
    sent = message_set(message(b"data"))
    end = produced(client, "multi", sent)
    client.send(multifetch(("multi", 0, 0, 1024),       # data
                           ("multi", 0, end + 1, 1024),  # out of range
                           ("multi", 5, 0, 1024),        # wrong partition
                           ("..", 0, 0, 1024),           # invalid topic
                           ("multi", 0, 0, -5),          # negative max size
                           ("multi", 1, 0, 1024)))       # valid partition without a log
    parts = [struct.pack(">ih", 2 + len(sent), NO_ERROR) + sent,
             struct.pack(">ih", 2, OFFSET_OUT_OF_RANGE),
             struct.pack(">ih", 2, WRONG_PARTITION),
             struct.pack(">ih", 2, UNKNOWN),
             struct.pack(">ih", 2, INVALID_FETCH_SIZE),
             struct.pack(">ih", 2, NO_ERROR)]
    body = b"".join(parts)
    assert raw_response(client) == struct.pack(">ih", 2 + len(body), NO_ERROR) + body


# --- offsets ------------------------------------------------------------------------------

@pytest.mark.parametrize("time_ms, expected", [(-1, [0]), (-2, [0]), (0, []), (1_700_000_000_000, [])])
def test_offsets_of_partition_without_log_is_zero_for_latest_and_earliest_else_empty(
        client, time_ms, expected):
    assert offsets_result(client, "no-log-here", 1, time_ms, 10) == expected


def test_offsets_of_log_with_data_list_end_and_segment_start_newest_first(client):
    end = produced(client, "offsets-data", message_set(message(b"a"), message(b"bb")))
    assert offsets_result(client, "offsets-data", 0, -1, 10) == [end, 0]  # descending
    assert offsets_result(client, "offsets-data", 0, -1, 1) == [end]
    assert offsets_result(client, "offsets-data", 0, -2, 10) == [0]
    assert offsets_result(client, "offsets-data", 0, 0, 10) == []  # nothing written before 1970
    assert offsets_result(client, "offsets-data", 0, -1, 0) == []


# --- fetch.wait.max.ms (not in 0.7): caught-up fetches wait for the next flush --------------

def test_caught_up_fetch_is_held_until_a_flush_brings_data(broker_factory):
    broker = broker_factory("waiting", properties={"fetch.wait.max.ms": "20000"})
    with broker.connect() as consumer, broker.connect() as producer:
        end = produced(producer, "held", message_set(message(b"first")))
        consumer.send(fetch("held", offset=end))
        producer.send(produce("held", 0, message_set(message(b"second"))))
        # An answer before the 20 s wait ran out, and with the new message: the flush woke it.
        assert raw_response(consumer) == struct.pack(">ih", 2 + len(message_set(message(b"second"))), 0) \
            + message_set(message(b"second"))


def test_caught_up_fetch_is_answered_empty_when_the_wait_runs_out(broker_factory):
    broker = broker_factory("waiting", properties={"fetch.wait.max.ms": "300"})
    with broker.connect() as consumer:
        end = produced(consumer, "idle", message_set(message(b"only")))
        started = time.monotonic()
        consumer.send(fetch("idle", offset=end))
        assert raw_response(consumer) == EMPTY_FETCH_RESPONSE
        assert time.monotonic() - started >= 0.3
        assert fetch_result(consumer, "idle", offset=0)[1] == message_set(message(b"only"))  # not held
