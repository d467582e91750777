"""Spec section 7: V1 byte for byte, V8 by decompress-and-compare, V9 from a real 0.7.2 segment."""

import hashlib
from pathlib import Path

from twisted_broker.codec.kafka07.compression import GZIP, decompress
from twisted_broker.codec.kafka07.crc import crc32
from twisted_broker.codec.kafka07.message import MAGIC_0, MAGIC_1, Message
from twisted_broker.codec.kafka07.message_set import (
    encode_message_set, iter_entries, iter_messages, scan, valid_bytes, validate_message_set,
)

FIXTURE = Path(__file__).parents[3] / "fixtures" / "MagicByte0-0" / "00000000000000000000.kafka"

# V1: "hello" as a one-entry message set, magic 1 and magic 0.
V1 = (b"\x00\x00\x00\x0b"   # length: 11 bytes follow
      b"\x01"               # magic: 1
      b"\x00"               # attributes: codec none
      b"\x36\x10\xa6\x86"   # crc: CRC32("hello")
      b"hello")             # payload
V1_MAGIC_0 = (b"\x00\x00\x00\x0a"  # length: 10 bytes follow
              b"\x00"              # magic: 0, no attributes byte
              b"\x36\x10\xa6\x86"  # crc: CRC32("hello")
              b"hello")            # payload

# V8: a GZIP wrapper of "a", "b" as Python's gzip module writes it.
V8_INNER = (b"\x00\x00\x00\x07"     # length: 7 bytes follow
            b"\x01" b"\x00"         # magic 1, codec none
            b"\xe8\xb7\xbe\x43"     # crc: CRC32("a")
            b"a"                    # payload
            b"\x00\x00\x00\x07"     # length: 7 bytes follow
            b"\x01" b"\x00"         # magic 1, codec none
            b"\x71\xbe\xef\xf9"     # crc: CRC32("b")
            b"b")                   # payload
V8_GZIP = (b"\x1f\x8b"          # gzip id
           b"\x08"              # method: deflate
           b"\x00"              # flags: none
           b"\x00\x00\x00\x00"  # mtime: 0
           b"\x02"              # XFL: 2 (best compression)
           b"\x03"              # OS: 3 (Unix)
           + bytes.fromhex("636060606764" "78b17d9f7322039859b8effdcf2400")  # deflate data
           + b"\xb4\x31\x94\x03"   # CRC32 of the 22 inner bytes, little-endian
           + b"\x16\x00\x00\x00")  # ISIZE: 22, little-endian
V8_WRAPPER = (b"\x00\x00\x00\x2d"   # length: 45 bytes follow
              b"\x01"               # magic: 1
              b"\x01"               # attributes: codec gzip
              b"\x08\x41\x2e\xbf"   # crc: CRC32 of the 39 gzip bytes
              + V8_GZIP)            # payload: the gzip stream
# Java's GZIPOutputStream differs only in the header's XFL and OS bytes, and so in the CRC.
V8_JAVA_GZIP = V8_GZIP[:8] + b"\x00" b"\xff" + V8_GZIP[10:]  # XFL 0, OS 255 (unknown)
V8_JAVA_WRAPPER = (b"\x00\x00\x00\x2d"   # length: 45 bytes follow
                   b"\x01"               # magic: 1
                   b"\x01"               # attributes: codec gzip
                   b"\x64\x0d\x33\xe1"   # crc: CRC32 of Java's 39 gzip bytes
                   + V8_JAVA_GZIP)       # payload

# V9: each of the fixture's 100 entries.
V9_ENTRY = (b"\x00\x00\x00\x69"   # length: 105 bytes follow
            b"\x00"               # magic: 0
            b"\x5e\x0e\x5d\x8f"   # crc: CRC32("x" * 100)
            + b"x" * 100)         # payload


def test_v1_magic_1_hello_encodes_byte_exact():
    assert encode_message_set([b"hello"]) == V1


def test_v1_magic_0_hello_encodes_byte_exact():
    assert encode_message_set([b"hello"], magic=MAGIC_0) == V1_MAGIC_0


def test_v1_decodes_to_one_valid_hello_at_offset_0_next_15():
    [(offset, next_offset, message)] = list(iter_entries(V1))
    assert (offset, next_offset) == (0, 15)
    assert message == Message(MAGIC_1, 0, 0x3610A686, b"hello")
    assert message.is_valid()


def test_v1_magic_0_decodes_to_the_same_payload_and_crc():
    [(offset, next_offset, message)] = list(iter_entries(V1_MAGIC_0))
    assert (offset, next_offset) == (0, 14)
    assert message == Message(MAGIC_0, 0, 0x3610A686, b"hello")


def test_v8_inner_set_is_what_we_encode_for_a_and_b():
    assert encode_message_set([b"a", b"b"]) == V8_INNER


def test_v8_python_gzip_wrapper_decodes_to_a_and_b():
    assert crc32(V8_GZIP) == 0x08412EBF
    assert decompress(GZIP, V8_GZIP) == V8_INNER
    assert [bytes(m.payload) for _o, _n, m in iter_messages(V8_WRAPPER)] == [b"a", b"b"]
    assert validate_message_set(V8_WRAPPER).message_count == 2


def test_v8_java_gzip_header_decodes_the_same():
    assert crc32(V8_JAVA_GZIP) == 0x640D33E1  # the CRC the spec gives for Java's wrapper
    assert decompress(GZIP, V8_JAVA_GZIP) == V8_INNER
    assert [bytes(m.payload) for _o, _n, m in iter_messages(V8_JAVA_WRAPPER)] == [b"a", b"b"]
    assert validate_message_set(V8_JAVA_WRAPPER).message_count == 2


def test_v9_fixture_is_the_0_7_2_segment():
    data = FIXTURE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == (
        "0db77e65c9cbe560e47d45e6dd43b8e61adf0c0e39c6ed9fe16890ef8d109625")
    assert data == V9_ENTRY * 100


def test_v9_holds_100_valid_magic_0_messages_of_100_x():
    entries = list(iter_entries(FIXTURE.read_bytes()))
    assert len(entries) == 100
    for index, (offset, next_offset, message) in enumerate(entries):
        assert (offset, next_offset) == (109 * index, 109 * (index + 1))
        assert message.magic == MAGIC_0
        assert message.crc == 0x5E0E5D8F
        assert message.is_valid()
        assert bytes(message.payload) == b"x" * 100


def test_v9_scans_whole_with_every_crc_valid():
    data = FIXTURE.read_bytes()
    result = scan(data, check_crc=True, deep=True)
    assert (result.valid_bytes, result.message_count, result.error) == (10900, 100, None)
    assert valid_bytes(data) == 10900
