"""Checking segment bytes loaded from disk before serving them: known-good ranges and damage.

How this works: 0.7 trusted every byte of an older segment and recovered only the newest
after a crash, so a message damaged on disk (a flipped bit, a lost page) went out to
consumers, which failed on its CRC. Here each segment keeps the ranges of its file already
known to hold valid entries: what this process appended (the broker validated it) and what
recovery scanned. A fetch whose region is not covered has that region scanned once (CRC of
each top-level entry, through a read-only memory map: no copy) before it is served. The first
bad entry found is recorded as damaged: fetches end before it, a fetch at it gets
InvalidMessage (code 2) instead of the bytes, and it is logged once (by the segment). Nothing
is truncated: older segments hold acknowledged messages, and an operator can move a consumer
past the damaged one (the log line gives the next offset when its length field is intact).

No Twisted, no timers; the cost is one CRC pass over each loaded byte that is read, once per
broker run.
"""

from __future__ import annotations

import mmap
import os
import struct
from bisect import bisect_right

from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka07.message_set import scan

_LENGTH = struct.Struct(">i")
_MIN_ENTRY = 5


class VerifiedRanges:
    """Disjoint, sorted ``[start, end)`` file ranges known to hold only valid entries."""

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def covered_until(self, position: int) -> int:
        """The end of the range holding ``position`` (``position`` itself if none does)."""
        index = bisect_right(self._starts, position) - 1
        if index >= 0 and self._ends[index] > position:
            return self._ends[index]
        return position

    def add(self, start: int, end: int) -> None:
        """Mark ``[start, end)`` as verified, merging it with the ranges it touches."""
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        if starts and ends[-1] == start:  # the usual case: an append after verified bytes
            ends[-1] = end
            return
        first = bisect_right(ends, start - 1)  # first range ending at or after start
        last = bisect_right(starts, end)  # ranges [first, last) touch [start, end]
        if first < last:
            start, end = min(start, starts[first]), max(end, ends[last - 1])
        starts[first:last] = [start]
        ends[first:last] = [end]

    def cut(self, size: int) -> None:
        """Forget everything at or past ``size`` (the file was truncated)."""
        index = bisect_right(self._starts, size - 1) if size > 0 else 0
        del self._starts[index:], self._ends[index:]
        if self._ends and self._ends[-1] > size:
            self._ends[-1] = size


def scan_entries(fd: int, start: int, end: int) -> tuple[int, InvalidMessage | None]:
    """CRC-check the entries in ``[start, end)`` of a file; (valid bytes, first error or None).

    ``start`` must be a message boundary. Positions in the error are relative to ``start``.
    """
    if end <= start:
        return 0, None
    with mmap.mmap(fd, end, access=mmap.ACCESS_READ) as mapped:
        with memoryview(mapped)[start:end] as view:
            result = scan(view, check_crc=True)
    return result.valid_bytes, result.error


def entry_length(fd: int, position: int) -> int | None:
    """The length field at ``position`` of a file, or None past its end."""
    header = os.pread(fd, 4, position)
    return _LENGTH.unpack(header)[0] if len(header) == 4 else None


def looks_like_damaged_boundary(fd: int, position: int, size: int) -> bool:
    """True if ``position`` starts a well-framed entry whose CRC fails, followed by a valid entry
    or by the end of the data: a damaged message at a true boundary, not a misaligned offset
    (a misaligned offset almost never frames onto an entry with a matching CRC)."""
    length = entry_length(fd, position)
    if length is None or length < _MIN_ENTRY or position + 4 + length > size:
        return False
    following = position + 4 + length
    valid, error = scan_entries(fd, position, following)
    if error is None or valid:
        return False
    if following == size:
        return True
    next_length = entry_length(fd, following)
    if next_length is None or next_length < _MIN_ENTRY or following + 4 + next_length > size:
        return False
    return scan_entries(fd, following, following + 4 + next_length)[1] is None
