"""Fetched message sets as Arrow columns: offset, next_offset, payload, crc_valid.

The loader's executors turn each fetch (up to ``fetch.size`` bytes, thousands of messages)
into one group of Arrow arrays instead of one Python object per message:

- a *plain run* (consecutive uncompressed magic-1 entries, the usual content of a log) is
  walked once for its entry boundaries, each payload's CRC checked on the way; the payloads
  are then cut out of the fetched bytes by Arrow in one vectorized ``binary_slice`` over an
  array whose elements are the whole entries (``[length][magic][attributes][crc][payload]``,
  10 header bytes each);
- a compressed wrapper is decompressed and its inner set decoded the same way (inner sets are
  plain runs too); every inner message reports 0.7's offsets (spec 3.5): ``offset`` is the
  wrapper's own offset, ``next_offset`` the wrapper's offset for all but the last inner
  message, and the offset after the wrapper for the last;
- magic-0 entries (Ruby and C++ clients) are taken one by one.

CRC modes: ``fail`` raises CrcMismatch at the first bad message (its log offset in the error);
``mark`` keeps every message and reports ``crc_valid`` (a wrapper whose own CRC fails marks
all its inner messages; a wrapper that does not decompress becomes one row holding its raw
compressed payload, marked invalid); ``none`` checks nothing and reports ``crc_valid`` null.

Pure: bytes in, arrays out; no I/O and no Spark.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from twisted_broker.errors import CorruptWrapper, CrcMismatch, InvalidMessage
from twisted_broker.spark.options import CRC_FAIL, CRC_MARK, CRC_MODES, CRC_NONE
from twisted_broker.codec.kafka07.compression import DEFAULT_MAX_BYTES, DecompressionError, decompress
from twisted_broker.codec.kafka07.crc import crc32
from twisted_broker.codec.kafka07.message import ENTRY_HEADER_1, Message
from twisted_broker.codec.kafka07.message_set import MAX_WRAPPER_DEPTH, iter_entries


_HEADER_BYTES = ENTRY_HEADER_1.size  # length, magic, attributes, crc: 10 bytes before a payload
_TO_END = 2**31 - 1  # binary_slice's stop=None is broken in pyarrow 26 ("negative buffer resize")


@dataclass(frozen=True)
class MessageColumns:
    """The messages of one fetched set, in log order, as equal-length Arrow arrays."""

    offset: pa.Array  # int64: the entry's offset (a wrapper's, for its inner messages)
    next_offset: pa.Array  # int64: where a consumer resumes after this message (spec 3.5)
    payload: pa.Array  # binary
    crc_valid: pa.Array  # bool; all null in CRC mode "none"
    crc_failures: int
    valid_bytes: int = 0  # bytes of the complete entries decoded: the next fetch starts after them

    @property
    def num_rows(self) -> int:
        return len(self.payload)

    @classmethod
    def concat(cls, parts: "list[MessageColumns]") -> "MessageColumns":
        """``parts`` (consecutive, in log order) as one; ``valid_bytes`` is their sum."""
        if len(parts) == 1:
            return parts[0]
        return cls(*(pa.concat_arrays([getattr(part, name) for part in parts])
                     for name in ("offset", "next_offset", "payload", "crc_valid")),
                   crc_failures=sum(part.crc_failures for part in parts),
                   valid_bytes=sum(part.valid_bytes for part in parts))


class _Pieces:
    """Column pieces in log order, concatenated once at the end."""

    def __init__(self, checked: bool) -> None:
        self.checked = checked
        self.offset: list[pa.Array] = []
        self.next_offset: list[pa.Array] = []
        self.payload: list[pa.Array] = []
        self.crc_valid: list[pa.Array] = []
        self.crc_failures = 0

    def add(self, offset: pa.Array, next_offset: pa.Array, payload: pa.Array, crc_valid: pa.Array) -> None:
        self.offset.append(offset)
        self.next_offset.append(next_offset)
        self.payload.append(payload)
        self.crc_valid.append(crc_valid)

    def finish(self, valid_bytes: int) -> MessageColumns:
        def concat(pieces: list[pa.Array], type_: pa.DataType) -> pa.Array:
            if not pieces:
                return pa.array([], type_)
            return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)

        return MessageColumns(concat(self.offset, pa.int64()), concat(self.next_offset, pa.int64()),
                              concat(self.payload, pa.binary()), concat(self.crc_valid, pa.bool_()),
                              self.crc_failures, valid_bytes)


# length, then magic and attributes read as one 16-bit field: 0x0100 is magic 1 with no
# attribute bit set, the plain entry; anything else (a codec, an attribute bit this code does
# not know, magic 0) leaves the fast loop for the entry-at-a-time path, which handles it.
_PLAIN_HEADER = struct.Struct(">iHI")
_PLAIN_MAGIC_ATTRIBUTES = 0x0100


def _plain_run(data: bytes, pos: int, end: int, check: bool) -> tuple[array, int, list[int]]:
    """Walk the complete uncompressed magic-1 entries from ``pos``.

    Returns their boundaries relative to ``pos`` (``[0, end of 1st, ..., end of last]``, int32,
    as Arrow's binary offsets want them), the position after the run, and the indexes of the
    messages whose CRC fails (empty unless ``check``). This is the loader's per-message loop:
    everything it touches is a local (a global lookup per name and message costs more here
    than the CRC's call overhead). ``data`` is best ``bytes``:
    a 200-byte slice of bytes for the CRC is cheaper than a memoryview slice (0.32 against
    0.45 us per message, walk and CRC, measured).
    """
    bounds = array("i", [0])
    append = bounds.append
    bad: list[int] = []
    unpack = _PLAIN_HEADER.unpack_from
    plain = _PLAIN_MAGIC_ATTRIBUTES
    checksum = crc32
    start = pos
    last = end - 10  # _HEADER_BYTES: a header must fit
    if check:
        while pos <= last:
            size, magic_attributes, crc = unpack(data, pos)
            stop = pos + 4 + size
            if magic_attributes != plain or size < 6 or stop > end:
                break
            if checksum(data[pos + 10:stop]) != crc:
                bad.append(len(bounds) - 1)
            pos = stop
            append(pos - start)
    else:
        while pos <= last:
            size, magic_attributes, _crc = unpack(data, pos)
            stop = pos + 4 + size
            if magic_attributes != plain or size < 6 or stop > end:
                break
            pos = stop
            append(pos - start)
    return bounds, pos, bad


def _run_payloads(buffer: pa.Buffer, start: int, bounds: array) -> pa.Array:
    """The payloads of a plain run: whole entries as binary elements, minus their headers."""
    count = len(bounds) - 1
    entries = pa.Array.from_buffers(pa.binary(), count,
                                    [None, pa.py_buffer(bounds), buffer.slice(start, bounds[-1])])
    return pc.binary_slice(entries, _HEADER_BYTES, _TO_END)


def _validity(count: int, bad: list[int], checked: bool) -> pa.Array:
    if not checked:
        return pa.nulls(count, pa.bool_())
    if not bad:
        return pa.repeat(pa.scalar(True), count)
    flags = [True] * count
    for index in bad:
        flags[index] = False
    return pa.array(flags, pa.bool_())


def _entry_at(view: memoryview, pos: int, end: int, offset: int) -> tuple[int, Message] | None:
    """(position after, message) of the one entry at ``pos``; None for a partial tail.

    Raises the InvalidMessage subclass of a malformed entry, positioned at log ``offset``.
    """
    try:
        for _offset, next_position, message in iter_entries(view[pos:end]):
            return pos + next_position, message
    except InvalidMessage as exc:
        raise type(exc)(offset, exc.reason) from None
    return None


def decode_message_set(data: bytes, base_offset: int, *, crc: str = CRC_FAIL,
                       max_decompressed_bytes: int = DEFAULT_MAX_BYTES) -> MessageColumns:
    """Decode the complete entries of ``data`` (fetched at log offset ``base_offset``).

    A trailing partial entry is ignored, as a fetch cut at ``maxSize`` ends in one: the
    result's ``valid_bytes`` is where the complete entries end. Raises
    CrcMismatch (mode ``fail``), CorruptWrapper (a wrapper that does not decompress, except
    in mode ``mark``) and the other InvalidMessage subclasses for a malformed entry; their
    ``position`` is the log offset of the entry.
    """
    if crc not in CRC_MODES:
        raise ValueError(f"crc mode {crc!r} is not one of {', '.join(CRC_MODES)}")
    check = crc != CRC_NONE
    view = memoryview(data)
    buffer = pa.py_buffer(data)
    pieces = _Pieces(check)
    pos, end = 0, len(view)
    while end - pos >= 4:
        bounds, stop, bad = _plain_run(data, pos, end, check)
        count = len(bounds) - 1
        if count:
            if bad and crc == CRC_FAIL:
                bad_offset = base_offset + pos + bounds[bad[0]]
                raise CrcMismatch(bad_offset, "the payload does not match the stored CRC")
            pieces.crc_failures += len(bad)
            offsets = pc.add(pa.Array.from_buffers(pa.int32(), count + 1, [None, pa.py_buffer(bounds)])
                             .cast(pa.int64()), base_offset + pos)
            pieces.add(offsets.slice(0, count), offsets.slice(1, count),
                       _run_payloads(buffer, pos, bounds), _validity(count, bad, check))
            pos = stop
            continue
        entry = _entry_at(view, pos, end, base_offset + pos)
        if entry is None:
            break
        stop, message = entry
        _add_entry(pieces, message, base_offset + pos, base_offset + stop, crc, max_decompressed_bytes)
        pos = stop
    return pieces.finish(pos)


def _add_entry(pieces: _Pieces, message: Message, offset: int, next_offset: int, crc: str,
               max_bytes: int) -> None:
    """Add one top-level entry that is not plain: a magic-0 message or a compressed wrapper."""
    check = crc != CRC_NONE
    valid = message.is_valid() if check else None
    if valid is False and crc == CRC_FAIL:
        raise CrcMismatch(offset, "the payload does not match the stored CRC")
    if not message.codec:
        pieces.crc_failures += valid is False
        pieces.add(pa.array([offset], pa.int64()), pa.array([next_offset], pa.int64()),
                   pa.array([bytes(message.payload)], pa.binary()), pa.array([valid], pa.bool_()))
        return
    try:
        payloads, flags = _inner_messages(message, check, max_bytes, 1)
    except (InvalidMessage, DecompressionError) as exc:
        reason = getattr(exc, "reason", str(exc))
        if crc != CRC_MARK:
            raise CorruptWrapper(offset, f"compressed wrapper: {reason}") from None
        # Keep the evidence: the raw wrapper payload, as one row marked invalid.
        pieces.crc_failures += 1
        pieces.add(pa.array([offset], pa.int64()), pa.array([next_offset], pa.int64()),
                   pa.array([bytes(message.payload)], pa.binary()), pa.array([False], pa.bool_()))
        return
    if not payloads:
        return  # an empty wrapper: no message to report
    payload = payloads[0] if len(payloads) == 1 else pa.concat_arrays(payloads)
    count = len(payload)
    if not count:
        return
    if not check:
        crc_valid = pa.nulls(count, pa.bool_())
    elif valid is False:  # the wrapper's own CRC failed: nothing inside can be trusted
        crc_valid = pa.repeat(pa.scalar(False), count)
    else:
        crc_valid = flags[0] if len(flags) == 1 else pa.concat_arrays(flags)
    failures = count - pc.sum(crc_valid).as_py() if check else 0
    if failures and crc == CRC_FAIL:
        raise CrcMismatch(offset, "an inner message of the compressed wrapper does not match its CRC")
    pieces.crc_failures += failures
    offsets = pa.repeat(pa.scalar(offset, pa.int64()), count)
    nexts = pa.concat_arrays([offsets.slice(0, count - 1), pa.array([next_offset], pa.int64())])
    pieces.add(offsets, nexts, payload, crc_valid)


def _inner_messages(wrapper: Message, check: bool, max_bytes: int,
                    depth: int) -> tuple[list[pa.Array], list[pa.Array]]:
    """Payload and crc_valid pieces of a wrapper's inner messages, nested wrappers flattened.

    Raises DecompressionError or InvalidMessage (positions within the inner set).
    """
    if depth > MAX_WRAPPER_DEPTH:
        raise InvalidMessage(0, f"wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
    inner = decompress(wrapper.codec, wrapper.payload, max_bytes)
    view, buffer = memoryview(inner), pa.py_buffer(inner)
    payloads: list[pa.Array] = []
    flags: list[pa.Array] = []
    pos, end = 0, len(view)
    while end - pos >= 4:
        bounds, stop, bad = _plain_run(inner, pos, end, check)
        if len(bounds) > 1:
            payloads.append(_run_payloads(buffer, pos, bounds))
            flags.append(_validity(len(bounds) - 1, bad, check))
            pos = stop
            continue
        entry = _entry_at(view, pos, end, pos)
        if entry is None:
            break  # a partial tail inside a wrapper is ignored, as 0.7's iterator does
        stop, message = entry
        if message.codec:
            nested_payloads, nested_flags = _inner_messages(message, check, max_bytes, depth + 1)
            if check and not message.is_valid():
                nested_flags = [pa.repeat(pa.scalar(False), len(piece)) for piece in nested_flags]
            payloads += nested_payloads
            flags += nested_flags
        else:
            payloads.append(pa.array([bytes(message.payload)], pa.binary()))
            flags.append(pa.array([message.is_valid() if check else None], pa.bool_()))
        pos = stop
    return payloads, flags
