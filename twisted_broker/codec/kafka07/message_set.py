"""Message sets: entries of ``int32 length N`` + N message bytes, back to back, no header.

Three readers share this framing:

- ``scan`` walks top-level entries for validation and recovery: it returns how many leading
  bytes are complete valid entries and the first problem with its byte position;
- ``validate_message_set`` is the broker's produce check (0.7.2 ``Log.append``): sizes, CRCs,
  and the inner messages of compressed wrappers, then the complete prefix to append;
- ``iter_entries`` / ``iter_messages`` yield ``(offset, next_offset, message)`` without copying
  payloads, the latter expanding wrappers with 0.7's offsets: every inner message but the last
  reports the wrapper's own offset as its next offset, the last reports the offset after the
  wrapper (so a commit inside a wrapper replays it: at-least-once).

Offsets are byte positions in the partition's log: ``base_offset`` is the log offset of
``buf[0]``. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from twisted_broker.errors import (
    CorruptWrapper, CrcMismatch, InvalidMessage, InvalidMessageSize, MessageSizeTooLarge,
    TruncatedMessage, UnknownCodec, UnknownMagic,
)
from twisted_broker.codec.kafka07.compression import (
    DEFAULT_MAX_BYTES, NO_COMPRESSION, DecompressionError, compress, decompress,
)
from twisted_broker.codec.kafka07.crc import crc32
from twisted_broker.codec.kafka07.message import (
    CODEC_MASK, ENTRY_HEADER_1, HEADER_0, MAGIC_0, MAGIC_1, Message, make_message,
)
from twisted_broker.codec.kafka07.primitives import INT32, Buffer

LENGTH_BYTES = 4
# Nesting deeper than this is refused: no 0.7 producer nests at all, and a hostile chain of
# wrappers must not recurse without bound.
MAX_WRAPPER_DEPTH = 4
# Produced sets up to this size are copied to bytes before they are checked (see scan); a
# larger one (up to max.socket.request.bytes) is checked through a view, not held twice.
COPY_TO_SCAN_BYTES = 1 << 20

_unpack_length = INT32.unpack_from
_unpack_crc_0 = HEADER_0.unpack_from
_pack_entry_1 = ENTRY_HEADER_1.pack


@dataclass(frozen=True, slots=True)
class ScanResult:
    valid_bytes: int  # bytes of complete, valid top-level entries at the front
    message_count: int  # messages in them, inner messages of wrappers included when deep
    error: InvalidMessage | None  # the first problem after them (TruncatedMessage for a partial tail)


@dataclass(frozen=True, slots=True)
class ValidatedMessageSet:
    """The part of a produced message set that may be appended, and its deep message count."""

    buffer: memoryview
    message_count: int

    def __len__(self) -> int:
        return len(self.buffer)


def _entry_error(view: memoryview, pos: int, end: int) -> InvalidMessage | None:
    """The problem with the entry at ``pos``, checking its framing, magic and codec (no CRC)."""
    if end - pos < LENGTH_BYTES:
        return TruncatedMessage(pos, f"{end - pos} bytes left, less than a length field")
    (size,) = _unpack_length(view, pos)
    if size < HEADER_0.size:
        return InvalidMessageSize(pos, f"length {size} is below the 5-byte minimum")
    if pos + LENGTH_BYTES + size > end:
        return TruncatedMessage(pos, f"length {size} runs past the end of the buffer ({end - pos - 4} bytes left)")
    magic = view[pos + 4]
    if magic == MAGIC_1:
        if size < ENTRY_HEADER_1.size - LENGTH_BYTES:
            return InvalidMessageSize(pos, f"length {size} is below the 6-byte magic-1 minimum")
        if view[pos + 5] & CODEC_MASK == CODEC_MASK:
            return UnknownCodec(pos, "codec 3 in the attributes")
        return None
    if magic == MAGIC_0:
        return None
    return UnknownMagic(pos, f"magic byte {magic}")


def _payload_bounds(view: memoryview, pos: int) -> tuple[int, int, int, int]:
    """(magic, attributes, crc, payload start) of a well-framed entry at ``pos``."""
    if view[pos + 4] == MAGIC_1:
        _, magic, attributes, crc = ENTRY_HEADER_1.unpack_from(view, pos)
        return magic, attributes, crc, pos + 10
    magic, crc = _unpack_crc_0(view, pos + 4)
    return magic, 0, crc, pos + 9


def scan(buf: Buffer, *, check_crc: bool = True, deep: bool = False,
         max_payload_bytes: int | None = None,
         max_decompressed_bytes: int = DEFAULT_MAX_BYTES) -> ScanResult:
    """Walk top-level entries until the first invalid or incomplete one.

    ``deep`` also decompresses wrappers and checks every inner message (CRC, framing);
    ``max_payload_bytes`` makes an oversize top-level payload an error (MessageSizeTooLarge is
    raised, not returned, because 0.7 drops such a request whatever else is wrong with it).
    """
    view = memoryview(buf)
    end = len(view)
    pos = count = 0
    error: InvalidMessage | None = None
    # Slicing bytes (a copy) costs less than slicing a view, for payloads of a few KB.
    plain = buf if type(buf) is bytes else view
    size_limit = end if max_payload_bytes is None else max_payload_bytes + 6
    while pos < end:
        if check_crc:
            pos, run = _scan_plain(plain, pos, end, size_limit)
            count += run
            if pos >= end:
                break
        # One entry of any kind; _entry_error explains what is wrong with a bad one.
        if end - pos >= 10:
            size, magic, attributes, crc = ENTRY_HEADER_1.unpack_from(view, pos)
            stop = pos + 4 + size
            if magic == MAGIC_1 and size >= 6 and stop <= end and attributes & CODEC_MASK != CODEC_MASK:
                start = pos + 10
            else:
                error = _entry_error(view, pos, end)
                if error is not None:
                    break
                magic, attributes, crc, start = _payload_bounds(view, pos)
        else:
            error = _entry_error(view, pos, end)
            if error is not None:
                break
            size = _unpack_length(view, pos)[0]
            stop = pos + 4 + size
            magic, attributes, crc, start = _payload_bounds(view, pos)
        payload = view[start:stop]
        if max_payload_bytes is not None and stop - start > max_payload_bytes:
            raise MessageSizeTooLarge(pos, stop - start, max_payload_bytes)
        if check_crc and crc32(payload) != crc:
            error = CrcMismatch(pos, f"stored CRC {crc:#010x}, payload CRC {crc32(payload):#010x}")
            break
        if deep and attributes & CODEC_MASK:
            try:
                count += _count_inner(attributes & CODEC_MASK, payload, max_decompressed_bytes, 1)
            except InvalidMessage as exc:
                error = CorruptWrapper(pos, f"wrapper ({exc})")
                break
        else:
            count += 1
        pos = stop
    if error is not None and max_payload_bytes is not None:
        _raise_if_oversize(view, pos, max_payload_bytes)
    return ScanResult(pos, count, error)


def _scan_plain(data: Buffer, pos: int, end: int, size_limit: int) -> tuple[int, int]:
    """Walk the usual entries from ``pos``: magic 1, uncompressed, complete, length at most
    ``size_limit``, CRC right. Return (where the walk stopped, entries walked).

    The produce path's per-message loop, so it does only what such an entry needs; scan
    looks at the entry it stops at with all its checks.
    """
    unpack_header = ENTRY_HEADER_1.unpack_from
    count = 0
    while end - pos >= 10:
        size, magic, attributes, crc = unpack_header(data, pos)
        stop = pos + 4 + size
        if (magic != MAGIC_1 or attributes & CODEC_MASK or size < 6 or stop > end or size > size_limit
                or crc32(data[pos + 10:stop]) != crc):
            break
        count += 1
        pos = stop
    return pos, count


def _raise_if_oversize(view: memoryview, pos: int, limit: int) -> None:
    # 0.7.2 checks every payload size before any CRC, so an oversize message after a corrupt
    # one still means "drop silently". Only the error path pays for this second walk.
    end = len(view)
    while _entry_error(view, pos, end) is None:
        (size,) = _unpack_length(view, pos)
        payload_bytes = size - (6 if view[pos + 4] == MAGIC_1 else 5)
        if payload_bytes > limit:
            raise MessageSizeTooLarge(pos, payload_bytes, limit)
        pos += 4 + size


def _count_inner(codec: int, payload: memoryview, max_bytes: int, depth: int) -> int:
    """Validate a wrapper's inner set completely and return its deep message count."""
    if depth > MAX_WRAPPER_DEPTH:
        raise InvalidMessage(0, f"wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
    try:
        inner = decompress(codec, payload, max_bytes)
    except DecompressionError as exc:
        raise InvalidMessage(0, str(exc)) from None
    # The usual inner set, plain magic-1 messages, complete, CRCs right: counted by the walk
    # that checks them. Anything else (magic 0, a nested wrapper, an error) is walked below,
    # which says what is wrong or counts what a nested wrapper holds. (Walking every inner
    # message as a Message object was 4 µs each: most of a compressed produce's check.)
    pos, count = _scan_plain(inner, 0, len(inner), len(inner))
    if pos == len(inner):
        return count
    result = scan(inner, check_crc=True, deep=False)
    if result.error is not None:
        raise result.error
    count = 0
    view = memoryview(inner)
    for _offset, _next, message in iter_entries(view):
        if message.codec:
            count += _count_inner(message.codec, message.payload, max_bytes, depth + 1)
        else:
            count += 1
    return count


def validate_message_set(buf: Buffer, *, max_message_size: int | None = None,
                         max_decompressed_bytes: int = DEFAULT_MAX_BYTES) -> ValidatedMessageSet:
    """Check a produced message set as 0.7.2's broker does; return the part to append.

    Raises MessageSizeTooLarge if any top-level payload exceeds ``max_message_size`` (0.7.2
    drops the request silently), or the InvalidMessage subclass of the first bad entry (0.7
    closes the connection): bad CRC (inner messages included), bad size, unknown magic or
    codec, undecompressable wrapper, or a first entry that is incomplete. An incomplete entry
    after at least one complete one is dropped silently, as 0.7 does.
    """
    if type(buf) is not bytes and len(buf) <= COPY_TO_SCAN_BYTES:
        buf = bytes(buf)  # one copy, so that scan slices bytes, not a view, per message
    end = len(buf)
    # The usual set, plain messages only, walked as scan's first step would; scan only when
    # it stops short (a wrapper, an error, an oversize payload), to say what it stopped at.
    pos, count = _scan_plain(buf, 0, end, end if max_message_size is None else max_message_size + 6)
    if pos == end:
        return ValidatedMessageSet(memoryview(buf), count)
    result = scan(buf, check_crc=True, deep=True, max_payload_bytes=max_message_size,
                  max_decompressed_bytes=max_decompressed_bytes)
    if result.error is not None and not (
            isinstance(result.error, TruncatedMessage) and result.valid_bytes > 0):
        raise result.error
    return ValidatedMessageSet(memoryview(buf)[:result.valid_bytes], result.message_count)


def valid_bytes(buf: Buffer) -> int:
    """Bytes of complete top-level entries at the front of a fetched set (no CRC check).

    The next fetch offset is ``fetch offset + valid_bytes``; a trailing partial entry is the
    normal effect of ``maxSize`` and is not an error.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while end - pos >= LENGTH_BYTES:
        (size,) = _unpack_length(view, pos)
        if size < HEADER_0.size or pos + 4 + size > end:
            break
        pos += 4 + size
    return pos


def _checked_entry(view: memoryview, pos: int, end: int) -> tuple[int, Message] | None:
    """(next position, message) of the entry at ``pos``; None for a partial tail; raises if bad."""
    error = _entry_error(view, pos, end)
    if error is not None:
        if isinstance(error, TruncatedMessage):
            return None
        raise error
    stop = pos + 4 + _unpack_length(view, pos)[0]
    magic, attributes, crc, start = _payload_bounds(view, pos)
    return stop, Message(magic, attributes, crc, view[start:stop])


def iter_entries(buf: Buffer, base_offset: int = 0) -> Iterator[tuple[int, int, Message]]:
    """Yield ``(offset, next_offset, message)`` for each complete top-level entry.

    Stops silently at a partial tail; raises the InvalidMessage subclass for a bad length,
    magic or codec (the CRC is not checked here: ``message.is_valid()``).
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while end - pos >= LENGTH_BYTES:
        entry = _checked_entry(view, pos, end)
        if entry is None:
            return
        stop, message = entry
        yield base_offset + pos, base_offset + stop, message
        pos = stop


def iter_messages(buf: Buffer, base_offset: int = 0,
                  max_decompressed_bytes: int = DEFAULT_MAX_BYTES,
                  on_end: Callable[[int], object] | None = None) -> Iterator[tuple[int, int, Message]]:
    """Like iter_entries, but expands compressed wrappers into their inner messages.

    Inner messages are yielded as ``(wrapper offset, next_offset, message)`` where next_offset
    is the wrapper's offset for all but the last inner message and the offset after the
    wrapper for the last (0.7's ``ByteBufferMessageSet`` deep iterator; nested wrappers are
    flattened the same way). Raises CorruptWrapper when a wrapper does not decompress.

    This is the consumers' per-message loop, so the usual entry (complete, magic 1,
    uncompressed) takes one unpack and one slice; any other entry goes through the checks of
    iter_entries. On 200-byte messages this is about 3x faster than iter_entries + a filter.
    Its payloads are bytes, copied out of ``buf`` (which is copied to bytes first unless it
    is bytes) or out of the decompressed wrapper: slicing bytes costs less than slicing a
    view, and a payload kept does not keep the whole fetch alive. ``on_end(valid_bytes)`` is
    called when the iteration reaches the end of the complete entries, so a consumer learns
    its next fetch offset without a second walk.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    view = memoryview(data)
    end = len(data)
    pos = 0
    unpack_header = ENTRY_HEADER_1.unpack_from
    new_message = Message
    while end - pos >= LENGTH_BYTES:
        # The usual entries, with nothing looked up but locals.
        while end - pos >= 10:
            size, magic, attributes, crc = unpack_header(data, pos)
            stop = pos + 4 + size
            if magic != 1 or attributes & 3 or size < 6 or stop > end:  # MAGIC_1, CODEC_MASK
                break
            yield base_offset + pos, base_offset + stop, new_message(1, attributes, crc, data[pos + 10:stop])
            pos = stop
        if end - pos < LENGTH_BYTES:
            break
        entry = _checked_entry(view, pos, end)
        if entry is None:
            break
        stop, message = entry
        if not message.codec:
            message.payload = bytes(message.payload)
            yield base_offset + pos, base_offset + stop, message
        else:
            # Errors carry the position in buf (errors.py), as iter_entries' do, not the log offset.
            inner = expand_wrapper(message, pos, max_decompressed_bytes)
            last = len(inner) - 1
            offset, next_offset = base_offset + pos, base_offset + stop
            for index, inner_message in enumerate(inner):
                inner_message.payload = bytes(inner_message.payload)
                yield offset, next_offset if index == last else offset, inner_message
        pos = stop
    if on_end is not None:
        on_end(pos)


def expand_wrapper(message: Message, position: int = 0,
                   max_decompressed_bytes: int = DEFAULT_MAX_BYTES, depth: int = 1) -> list[Message]:
    """The inner messages of a compressed wrapper, nested wrappers flattened, in order."""
    if depth > MAX_WRAPPER_DEPTH:
        raise CorruptWrapper(position, f"wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
    try:
        inner = decompress(message.codec, message.payload, max_decompressed_bytes)
    except DecompressionError as exc:
        raise CorruptWrapper(position, str(exc)) from None
    messages: list[Message] = []
    try:
        for _o, _n, inner_message in iter_entries(inner):
            if inner_message.codec:
                messages.extend(expand_wrapper(inner_message, position, max_decompressed_bytes, depth + 1))
            else:
                messages.append(inner_message)
    except CorruptWrapper:
        raise
    except InvalidMessage as exc:
        raise CorruptWrapper(position, f"inner message set: {exc}") from None
    return messages


def encode_message_set(payloads: Iterable[Buffer], magic: int = MAGIC_1) -> bytes:
    """Encode uncompressed payloads as one message set (magic 1 unless told otherwise)."""
    if magic == MAGIC_1:
        # One pack per message and one join: this is the producers' hot path.
        return b"".join([_pack_entry_1(6 + len(p), MAGIC_1, 0, crc32(p)) + p for p in payloads])
    return encode_messages(make_message(p, magic=magic) for p in payloads)


def encode_messages(messages: Iterable[Message]) -> bytes:
    """Encode already-built messages (CRCs as stored, valid or not) as a message set."""
    parts = []
    for message in messages:
        body = message.encode()
        parts.append(INT32.pack(len(body)))
        parts.append(body)
    return b"".join(parts)


def encode_compressed_message_set(payloads: Iterable[Buffer], codec: int) -> bytes:
    """One wrapper message holding all ``payloads``, compressed with ``codec``, as a set.

    This is what 0.7 producers send: a whole batch for one partition in one wrapper. With
    NO_COMPRESSION it is the plain set.
    """
    inner = encode_message_set(payloads)
    if codec == NO_COMPRESSION:
        return inner
    return encode_messages([make_message(compress(codec, inner), codec=codec)])
