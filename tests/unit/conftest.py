"""Fixtures shared by the unit tests of kafka_wire and storage: record batches built by hand."""

import struct

import pytest

_CRC32C_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _CRC32C_TABLE.append(_crc)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), what a record batch's crc field holds; slow, for tests only."""
    crc, table = 0xFFFFFFFF, _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)  # zigzag
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(data: bytes | None) -> bytes:
    return _varint(-1) if data is None else _varint(len(data)) + data


def make_batch(values, *, timestamps=None, keys=None, base_offset=0, producer_id=-1,
               producer_epoch=-1, base_sequence=-1, leader_epoch=-1, attributes=0) -> bytearray:
    """A record batch (magic 2) of uncompressed records, with a correct CRC-32C."""
    timestamps = timestamps or [1_700_000_000_000 + i for i in range(len(values))]
    keys = keys or [None] * len(values)
    records = bytearray()
    for delta, (value, key, timestamp) in enumerate(zip(values, keys, timestamps)):
        body = (b"\x00" + _varint(timestamp - timestamps[0]) + _varint(delta) + _field(key)
                + _field(value) + _varint(0))
        records += _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, timestamps[0], max(timestamps),
                            producer_id, producer_epoch, base_sequence, len(values)) + records
    return bytearray(struct.pack(">qiiBI", base_offset, len(after_crc) + 9, leader_epoch, 2, crc32c(after_crc))
                     + after_crc)


@pytest.fixture(name="make_batch")
def make_batch_fixture():
    return make_batch
