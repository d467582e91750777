"""FetchedMessageSet: the message set one fetch returned, with what it was fetched for.

Both consumers (blocking and Twisted) build these from Fetch and MultiFetch responses. The
broker's error code travels with the set; ``check()`` or iterating raises its exception.
Iterating yields ``(offset, next_offset, message)`` with 0.7's offsets (spec 3.5): compressed
wrappers are expanded, every inner message but the last reporting the wrapper's own offset.

A set cut short by the fetch size normally ends in a partial entry, which is ignored; the next
fetch starts at ``next_offset = offset + valid_bytes``. A set that holds no complete entry at
all means the first message is larger than the fetch size: no fetch of that size will ever
return it, so iterating raises InvalidFetchSize instead of yielding nothing forever (0.7 does
not retry with a bigger size either).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from twisted_broker.client.errors import error_for_code
from twisted_broker.errors import InvalidFetchSize, UnexpectedResponse
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_set import iter_entries, iter_messages, valid_bytes
from twisted_broker.codec.kafka07.primitives import INT32, Buffer
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.codec.kafka07.responses import NO_ERROR, decode_multifetch

_MIN_ENTRY_LENGTH = 5  # the magic-0 header; a smaller length is a corrupt entry, not a big one


class FetchedMessageSet:
    """What a fetch of ``topic``/``partition`` at ``offset`` (up to ``max_size`` bytes) returned.

    ``message_set`` is the raw set as the broker sent it (empty on an error). The object does
    not change, so it may be handed between threads.
    """

    __slots__ = ("topic", "partition", "offset", "max_size", "error_code", "message_set", "_valid_bytes")

    def __init__(self, request: FetchRequest, error_code: int, message_set: Buffer) -> None:
        self.topic = request.topic
        self.partition = request.partition
        self.offset = request.offset
        self.max_size = request.max_size
        self.error_code = error_code
        self.message_set = message_set
        self._valid_bytes: int | None = None

    def __repr__(self) -> str:
        return (f"FetchedMessageSet({self.topic}-{self.partition} at {self.offset}: "
                f"{len(self.message_set)} bytes, error {self.error_code})")

    def check(self) -> None:
        """Raise the exception of the broker's error code (OffsetOutOfRange, ...), if any."""
        if self.error_code != NO_ERROR:
            raise error_for_code(self.error_code,
                                 f"fetch of {self.topic}-{self.partition} at offset {self.offset}")

    @property
    def size_bytes(self) -> int:
        """Bytes the broker returned, a trailing partial entry included."""
        return len(self.message_set)

    @property
    def valid_bytes(self) -> int:
        """Bytes of the complete top-level entries at the front of the set."""
        if self._valid_bytes is None:
            self._valid_bytes = valid_bytes(self.message_set)
        return self._valid_bytes

    @property
    def next_offset(self) -> int:
        """Where the next fetch starts: the offset after the last complete entry."""
        return self.offset + self.valid_bytes

    def __iter__(self) -> Iterator[tuple[int, int, Message]]:
        """Yield ``(offset, next_offset, message)``, wrappers expanded (0.7's deep iterator).

        Raises the broker's error (see check()) or InvalidFetchSize at once; InvalidMessage
        subclasses for a malformed entry as the iteration reaches it. CRCs are not checked
        here: ``message.is_valid()``.
        """
        self.check()
        self._check_first_entry_fits()
        # The generator itself, not a wrapper around it: this is the consumers' hot loop. Its
        # end tells next_offset where the complete entries end, sparing a second walk.
        return iter_messages(self.message_set, self.offset, on_end=self._walked)

    def _walked(self, valid: int) -> None:
        self._valid_bytes = valid

    def iter_entries(self) -> Iterator[tuple[int, int, Message]]:
        """Yield the top-level entries, wrappers still compressed (``shallowiterator.enable``,
        for mirroring). Raises as ``__iter__`` does."""
        self.check()
        self._check_first_entry_fits()
        return iter_entries(self.message_set, self.offset)

    def _check_first_entry_fits(self) -> None:
        data = self.message_set
        if not data:
            return
        if len(data) >= 4:
            (length,) = INT32.unpack_from(data, 0)
            if length < _MIN_ENTRY_LENGTH or 4 + length <= len(data):
                return  # complete, or corrupt (the iterator reports that at its position)
            needed = f"{4 + length} bytes"
        else:
            needed = "more than its 4-byte length field"
        raise InvalidFetchSize(
            f"the message at offset {self.offset} of {self.topic}-{self.partition} needs {needed}, "
            f"larger than the fetch size of {self.max_size} bytes; raise fetch.size")


def decode_multifetch_response(requests: Sequence[FetchRequest], error_code: int,
                               body: Buffer) -> list[FetchedMessageSet]:
    """One FetchedMessageSet per request, in request order, from a MultiFetch response.

    ``body`` must stay unchanged while the sets are used (the sets are views into it). Raises
    UnexpectedResponse when the parts do not match the requests, or the whole response
    carries an error (0.7 always sends 0 there).
    """
    if error_code != NO_ERROR:
        raise error_for_code(error_code, f"multifetch of {len(requests)} partitions")
    try:
        parts = decode_multifetch(body)
    except ValueError as exc:  # Truncated
        raise UnexpectedResponse(f"malformed multifetch response: {exc}") from None
    if len(parts) != len(requests):
        raise UnexpectedResponse(f"multifetch response has {len(parts)} parts for {len(requests)} fetches")
    return [FetchedMessageSet(request, error, message_set)
            for request, (error, message_set) in zip(requests, parts)]
