"""Replication's request types: golden bytes, round trips, truncation anywhere refused."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka07.replication import (
    ALL_REQUEST_CLASSES, EpochEndOffsetRequest, EpochQuery, Metadata, MetadataRequest, PartitionMetadata,
    ProduceAckRequest, ReplicaFetchPartition, ReplicaFetchRequest, TopicMetadata, decode_epoch_end_offsets,
    decode_metadata, decode_produce_acks, decode_replica_fetch_response, encode_epoch_end_offsets,
    encode_metadata, encode_produce_acks, encode_replica_fetch_part_header, encode_replication_request,
)
from twisted_broker.codec.kafka07.requests import MultiProduceRequest, ProduceRequest, decode_request

REPLICA_FETCH_A_0 = (b"\x00\x00\x00\x40"                  # size: 64 bytes follow
                     b"\x00\x64"                          # request type: 100, replica fetch
                     b"\x00\x00\x00\x02"                  # replica: broker 2
                     b"\x00\x00\x01\xf4"                  # max wait: 500 ms
                     b"\x00\x00\x00\x01"                  # min bytes: 1
                     b"\x00\x00\x00\x07"                  # session id 7
                     b"\x00\x00\x00\x04"                  # session epoch 4
                     b"\x00\x01"                          # one partition listed
                     b"\x00\x01" b"a"                     # topic: "a"
                     b"\x00\x00\x00\x00"                  # partition 0
                     b"\x00\x00\x00\x03"                  # leader epoch 3
                     b"\x00\x00\x00\x00\x00\x00\x00\x18"  # offset 24
                     b"\x00\x10\x00\x00"                  # max bytes 1 MiB
                     b"\x00\x00\x00\x00\x00\x00\x00\x0c"  # flushed offset 12
                     b"\x00\x01"                          # one partition forgotten
                     b"\x00\x01" b"b"                     # topic: "b"
                     b"\x00\x00\x00\x05")                 # partition 5


def test_replica_fetch_golden_bytes():
    request = ReplicaFetchRequest(2, 500, 1, (ReplicaFetchPartition("a", 0, 3, 24, 1 << 20, 12),), 7, 4, (("b", 5),))
    assert encode_replication_request(request) == REPLICA_FETCH_A_0
    assert decode_request(REPLICA_FETCH_A_0[4:], ALL_REQUEST_CLASSES) == request


requests = st.one_of(
    st.builds(ReplicaFetchRequest, st.integers(0, 100), st.integers(0, 10_000), st.integers(0, 100),
              st.lists(st.builds(ReplicaFetchPartition, st.text(min_size=1, max_size=10), st.integers(0, 99),
                                 st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**31 - 1),
                                 st.integers(0, 2**62)), max_size=4).map(tuple),
              st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1),
              st.lists(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 99)), max_size=3).map(tuple)),
    st.builds(EpochEndOffsetRequest, st.integers(0, 100),
              st.lists(st.builds(EpochQuery, st.text(min_size=1, max_size=10), st.integers(0, 99),
                                 st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1)), max_size=4).map(tuple)),
    st.builds(ProduceAckRequest, st.sampled_from([-1, 0, 1]), st.integers(0, 60_000),
              st.lists(st.builds(ProduceRequest, st.text(min_size=1, max_size=10), st.integers(0, 99),
                                 st.binary(max_size=40)), max_size=3).map(lambda p: MultiProduceRequest(tuple(p)))),
    st.builds(MetadataRequest, st.lists(st.text(min_size=1, max_size=10), max_size=4).map(tuple)),
)


def _plain(request):
    # memoryview payloads compare by content once made bytes
    if isinstance(request, ProduceAckRequest):
        return (request.required_acks, request.timeout_ms,
                [(p.topic, p.partition, bytes(p.messages)) for p in request.produce.produces])
    return request


@given(requests)
def test_every_request_round_trips_and_any_cut_is_truncated(request):
    frame = encode_replication_request(request)[4:]
    assert _plain(decode_request(frame, ALL_REQUEST_CLASSES)) == _plain(request)
    for cut in range(2, len(frame)):
        with pytest.raises(Truncated):
            decode_request(frame[:cut], ALL_REQUEST_CLASSES)


def test_a_0_7_decoder_still_refuses_replication_types():
    with pytest.raises(ValueError, match="unknown request type 100"):
        decode_request(REPLICA_FETCH_A_0[4:])


def test_replica_fetch_answers_carry_the_session_then_per_partition_its_name_ends_epochs_and_messages():
    body = (b"\x00\x00\x00\x07" + encode_replica_fetch_part_header("a", 2, 0, 100, 130, [(2, 40), (3, 110)], 5)
            + b"hello" + encode_replica_fetch_part_header("b", 0, 74, -1, -1, [], 0))
    session_id, (first, second) = decode_replica_fetch_response(body)
    assert session_id == 7
    assert (first.topic, first.partition, first.error, first.high_watermark, first.log_end, first.epochs,
            bytes(first.messages)) == ("a", 2, 0, 100, 130, ((2, 40), (3, 110)), b"hello")
    assert (second.topic, second.partition, second.error, bytes(second.messages)) == ("b", 0, 74, b"")
    for cut in (3, len(body) - 3, 12):
        with pytest.raises(Truncated):
            decode_replica_fetch_response(body[:cut])
    assert decode_replica_fetch_response(b"\x00\x00\x00\x07") == (7, [])  # an idle session's answer


def test_small_responses_round_trip():
    assert decode_epoch_end_offsets(encode_epoch_end_offsets([(0, 3, 120), (75, -1, -1)])) == \
        [(0, 3, 120), (75, -1, -1)]
    assert decode_produce_acks(encode_produce_acks([("t", 0, 0, 24), ("u", 1, 19, -1)])) == \
        [("t", 0, 0, 24), ("u", 1, 19, -1)]
    metadata = Metadata(((0, "127.0.0.1", 9092), (1, "h", 9192)),
                        (TopicMetadata("t", 0, (PartitionMetadata(0, 1, 4, (1, 0), (1,)),)),
                         TopicMetadata("gone", 3, ())))
    assert decode_metadata(encode_metadata(metadata)) == metadata
