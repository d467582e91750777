"""Bytes that are not a valid request or batch get the codecs' clear errors, never a crash."""

from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka import record_compression
from twisted_broker.codec.kafka.primitives import Malformed
from twisted_broker.codec.kafka.protocol import REQUESTS, UnsupportedVersion, decode_request, encode_request
from twisted_broker.codec.kafka.record_batch import CorruptBatch, batch_values, build_batch, decode_batch
from twisted_broker.codec.kafka.record_compression import UnsupportedCompression
from tests.unit.codec.kafka.schema_values import values_of

REQUEST_ERRORS = (Truncated, Malformed, UnsupportedVersion)
BATCH_ERRORS = (CorruptBatch, UnsupportedCompression)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(REQUESTS)), st.binary(max_size=64))
def test_garbage_after_a_valid_header_is_a_request_error(key, garbage):
    frame = key[0].to_bytes(2, "big") + key[1].to_bytes(2, "big") + b"\0\0\0\1" + garbage
    try:
        decode_request(frame)
    except REQUEST_ERRORS:
        pass


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from(sorted(REQUESTS)))
def test_a_valid_request_with_bytes_changed_decodes_or_is_a_request_error(data, key):
    frame = bytearray(encode_request(key[0], key[1], 1, "c", data.draw(values_of(REQUESTS[key])))[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_request(bytes(frame))
    except REQUEST_ERRORS:
        pass


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from(sorted(record_compression.RECORD_CODEC_NAMES)))
def test_a_batch_with_bytes_changed_decodes_or_is_a_batch_error(data, codec):
    items = [(i, b"k%d" % i, bytes([i]) * (i * 40), [("h", b"x")]) for i in range(5)]
    batch = bytearray(build_batch(items, compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(21, len(batch) - 1))  # past the length and CRC
        batch[position] = data.draw(st.integers(0, 255))
    for read in (lambda b: decode_batch(b, verify=False), batch_values):
        try:
            read(bytes(batch))
        except BATCH_ERRORS:
            pass
