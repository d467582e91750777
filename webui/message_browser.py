"""Reading a page of a partition's messages over Fetch requests, forward or backward.

How this works
--------------
Offsets are byte positions (spec 3.5), so reading forward from a message boundary is easy:
fetch from it, take the complete entries, fetch again from the offset after the last one (a
fetch never spans two segments, so a page may take several). A first entry larger than the
fetch size is fetched again with a larger size, up to ``BROWSER_MAX_FETCH_BYTES``.

Reading backward (the newest messages, or the page before one) has no help from 0.7: nothing
indexes message boundaries. The end offset ``E`` is a boundary (the log's end, or the first
offset of a page shown before), so we fetch the ``window`` bytes before it and look for the
smallest position ``p`` in them from which a chain of complete entries, each with a matching
CRC, ends exactly at ``E`` (``codec.kafka07.message_search``). Bytes in the middle of a payload almost
never pass a CRC, let alone a chain of them landing on ``E``. Too few messages found widens
the window (x4) up to ``MAX_WINDOW_BYTES``; the log's earliest offset and its segment starts
bound it exactly. A corrupt message (bad CRC) breaks every chain through it: the page then
starts after it, and reading forward from an older offset shows it.

Each top-level entry becomes a BrowsedMessage with its offset, size, magic, codec and CRC
validity; a compressed wrapper is expanded into its inner messages, as DumpLogSegments does.
The decoding functions are pure; ``read_forward``/``read_backward`` take a ``fetch(offset,
max_size)`` that returns a Deferred FetchedMessageSet.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_search import find_message_start
from twisted_broker.codec.kafka07.message_set import expand_wrapper, iter_entries

FIRST_FETCH_BYTES = 64 * 1024
BROWSER_MAX_FETCH_BYTES = 16 * 1024 * 1024  # a larger message is reported, not fetched
FIRST_WINDOW_BYTES = 64 * 1024
MAX_WINDOW_BYTES = 4 * 1024 * 1024

Fetch = Callable[[int, int], Awaitable[FetchedMessageSet]]

_ERROR_NAMES = {1: "offset out of range", 2: "invalid message", 3: "wrong partition",
                4: "invalid fetch size", -1: "unknown error"}


@dataclass
class BrowsedMessage:
    offset: int  # where its top-level entry starts (inner messages share the wrapper's)
    next_offset: int  # the offset after its top-level entry
    size: int  # bytes of the message, without the 4-byte length
    magic: int
    codec: str
    crc: int
    valid: bool
    payload: bytes
    inner: list["BrowsedMessage"] = field(default_factory=list)  # a wrapper's messages
    inner_error: str | None = None  # a wrapper that does not decompress or parse


@dataclass
class BrowseResult:
    start: int  # offset of the first entry shown (or asked for)
    end: int  # the offset after the last entry shown
    messages: list[BrowsedMessage]
    problem: str | None = None  # why reading stopped early, if it did


def browsed(message: Message, offset: int, next_offset: int) -> BrowsedMessage:
    """One message's fields; a valid compressed wrapper also lists its inner messages."""
    entry = BrowsedMessage(offset, next_offset, message.size, message.magic, message.codec_name,
                           message.crc, message.is_valid(), bytes(message.payload))
    if message.codec and entry.valid:
        try:
            entry.inner = [browsed(inner, offset, next_offset) for inner in expand_wrapper(message)]
        except InvalidMessage as exc:
            entry.inner_error = exc.reason
    return entry


def decode_entries(data: bytes | memoryview, base_offset: int,
                   limit: int) -> tuple[list[BrowsedMessage], int, str | None]:
    """Up to ``limit`` complete top-level entries of ``data`` (at log offset ``base_offset``).

    Returns ``(messages, bytes consumed, problem)``: reading stops quietly at a partial last
    entry, and with a problem at an entry that cannot be framed (bad length, magic, codec).
    """
    messages: list[BrowsedMessage] = []
    consumed = 0
    entries = iter_entries(data, base_offset)
    try:
        for offset, next_offset, message in entries:
            messages.append(browsed(message, offset, next_offset))
            consumed = next_offset - base_offset
            if len(messages) >= limit:
                break
    except InvalidMessage as exc:
        return messages, consumed, f"no message can be read at offset {base_offset + exc.position}: {exc.reason}"
    finally:
        entries.close()
    return messages, consumed, None


def _fetch_problem(fetched: FetchedMessageSet, offset: int) -> str | None:
    if fetched.error_code == 0:
        return None
    name = _ERROR_NAMES.get(fetched.error_code, f"error {fetched.error_code}")
    return f"the broker answered the fetch at offset {offset} with {name}"


async def read_forward(fetch: Fetch, start: int, count: int) -> BrowseResult:
    """Up to ``count`` top-level entries from the boundary ``start`` on."""
    messages: list[BrowsedMessage] = []
    position, size = start, FIRST_FETCH_BYTES
    problem = None
    while len(messages) < count:
        fetched = await fetch(position, size)
        problem = _fetch_problem(fetched, position)
        if problem is not None or not fetched.message_set:
            break
        found, consumed, problem = decode_entries(fetched.message_set, position, count - len(messages))
        messages += found
        position += consumed
        if problem is not None:
            break
        if not consumed:  # the first entry does not fit in the fetch
            if size >= BROWSER_MAX_FETCH_BYTES:
                problem = f"the message at offset {position} is larger than {BROWSER_MAX_FETCH_BYTES} bytes"
                break
            size = min(size * 4, BROWSER_MAX_FETCH_BYTES)
    return BrowseResult(start, position, messages, problem)


async def read_range(fetch: Fetch, start: int, end: int) -> tuple[bytes, str | None]:
    """The log's bytes in ``[start, end)`` (several fetches when it spans segments)."""
    parts, position = [], start
    while position < end:
        fetched = await fetch(position, end - position)
        problem = _fetch_problem(fetched, position)
        if problem is not None:
            return b"".join(parts), problem
        if not fetched.message_set:
            break
        chunk = bytes(fetched.message_set[:end - position])
        parts.append(chunk)
        position += len(chunk)
    return b"".join(parts), None


async def read_backward(fetch: Fetch, end: int, count: int, *, earliest: int,
                        window: int = FIRST_WINDOW_BYTES) -> BrowseResult:
    """Up to ``count`` top-level entries ending at the boundary ``end`` (see the module doc)."""
    while True:
        low = max(earliest, end - window)
        data, problem = await read_range(fetch, low, end)
        if problem is not None:
            return BrowseResult(end, end, [], problem)
        if len(data) < end - low:
            return BrowseResult(end, end, [], f"the broker returned {len(data)} of the {end - low} bytes "
                                              f"before offset {end}")
        position = find_message_start(data)  # 0 at the earliest offset, unless damage breaks the chain
        messages = []
        if position is not None:
            messages, _consumed, problem = decode_entries(memoryview(data)[position:], low + position, len(data))
        if len(messages) >= count or low == earliest or window >= MAX_WINDOW_BYTES:
            break
        window *= 4
    if not messages:
        return BrowseResult(end, end, [], problem or (
            f"no run of valid messages ends at offset {end} within the {end - low} bytes before it "
            "(a corrupt message, or one larger than that); read forward from an older offset"))
    messages = messages[-count:]
    return BrowseResult(messages[0].offset, end, messages, problem)
