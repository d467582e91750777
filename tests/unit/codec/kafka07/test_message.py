"""One message: its two layouts, the CRC over the payload only, and the codec bits."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0, MAGIC_1, Message, make_message

HELLO_1 = (b"\x01"              # magic: 1
           b"\x00"              # attributes: codec none
           b"\x36\x10\xa6\x86"  # crc: CRC32("hello")
           b"hello")            # payload
HELLO_0 = (b"\x00"              # magic: 0, no attributes byte
           b"\x36\x10\xa6\x86"  # crc: CRC32("hello")
           b"hello")            # payload


def test_make_message_encodes_magic_1_with_attributes_and_crc():
    message = make_message(b"hello")
    assert message.encode() == HELLO_1
    assert message.size == len(HELLO_1) == 11


def test_make_message_encodes_magic_0_without_attributes():
    message = make_message(b"hello", magic=MAGIC_0)
    assert message.encode() == HELLO_0
    assert message.size == len(HELLO_0) == 10


def test_make_message_writes_the_codec_into_the_attributes():
    assert make_message(b"z", codec=GZIP).encode()[1] == GZIP
    assert make_message(b"z", codec=SNAPPY).encode()[1] == SNAPPY


def test_make_message_refuses_a_compressed_magic_0_message():
    with pytest.raises(ValueError):
        make_message(b"z", codec=GZIP, magic=MAGIC_0)


def test_make_message_refuses_an_unknown_magic():
    with pytest.raises(ValueError):
        make_message(b"z", magic=2)


@pytest.mark.parametrize("attributes, codec, name", [
    (0x00, NO_COMPRESSION, "none"), (0x01, GZIP, "gzip"), (0x02, SNAPPY, "snappy"),
    (0x03, 3, "invalid"), (0xFC, NO_COMPRESSION, "none"), (0xFD, GZIP, "gzip"),
])
def test_codec_is_the_low_two_attribute_bits(attributes, codec, name):
    message = Message(MAGIC_1, attributes, 0, b"")
    assert (message.codec, message.codec_name) == (codec, name)


@given(st.binary(max_size=300), st.sampled_from([MAGIC_0, MAGIC_1]))
def test_a_made_message_is_valid(payload, magic):
    assert make_message(payload, magic=magic).is_valid()


@given(st.binary(min_size=1, max_size=300), st.data())
def test_a_flipped_payload_byte_fails_the_crc(payload, data):
    index = data.draw(st.integers(0, len(payload) - 1))
    mask = data.draw(st.integers(1, 255))
    message = make_message(payload)
    corrupted = bytearray(payload)
    corrupted[index] ^= mask
    assert not Message(MAGIC_1, 0, message.crc, bytes(corrupted)).is_valid()


def test_the_crc_does_not_cover_magic_or_attributes():
    # 0.7 computes it over the payload alone: the same CRC for both magics and any attributes.
    assert make_message(b"hello").crc == make_message(b"hello", magic=MAGIC_0).crc
    assert Message(MAGIC_1, 0xFC, 0x3610A686, b"hello").is_valid()


def test_encode_keeps_the_stored_crc_even_when_it_is_wrong():
    assert Message(MAGIC_1, 0, 0xDEADBEEF, b"x").encode() == b"\x01\x00\xde\xad\xbe\xef" b"x"


def test_messages_compare_by_payload_bytes_not_buffer_identity():
    assert Message(MAGIC_1, 0, 1, memoryview(b"_ab_")[1:3]) == Message(MAGIC_1, 0, 1, b"ab")
    assert Message(MAGIC_1, 0, 1, b"ab") != Message(MAGIC_1, 0, 2, b"ab")
    assert Message(MAGIC_1, 0, 1, b"ab") != Message(MAGIC_0, 0, 1, b"ab")
