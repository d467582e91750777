"""Finding where messages start in raw log bytes read from an arbitrary offset.

Offsets are byte positions and nothing in a 0.7 log marks where a message starts, so a
reader that lands mid-message (the debug port's ``tail``, the web console's newest page,
Spark's split points) must find the first true boundary in what it read. Nothing here does
I/O; the entry checks are ``message_set``'s own, so a position passes exactly when ``scan``
would accept the entry there.

How this works: a position is a message start when whole entries follow one another from it
exactly to the end of the window (the end is a known boundary: the log's flushed end, or the
first offset of a page already shown), and its entries' CRCs match. True boundaries all chain
to the end; a misaligned position almost never frames a chain that lands on the end, and
practically never passes a CRC as well. The only thing that can fool it is a payload that
itself holds a well-formed message set, which no check on raw bytes can tell apart.

Cost: candidates are found in C by a regex (a plausible length, then magic 0 or 1), which
skips most of a large payload; each position is walked at most once, because ``reach``
remembers where earlier walks led, and each CRC is computed at most once, so the cost is
linear in the window. In practice the first true boundary is within one message's size.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from twisted_broker.errors import TruncatedMessage
from twisted_broker.codec.kafka07.crc import crc32
from twisted_broker.codec.kafka07.message import CODEC_MASK, MAGIC_0, MAGIC_1
# message_set's own entry checks, private there: one definition of a well-framed entry.
from twisted_broker.codec.kafka07.message_set import LENGTH_BYTES, _entry_error, _payload_bounds
from twisted_broker.codec.kafka07.primitives import INT32, Buffer

# What can start an entry: a length, then magic 0 or 1 (lookaheads, so matches may overlap).
# In a window under 16 MiB a complete entry's length has a top byte of 0 and is at least 5.
_ENTRY_START = re.compile(b"(?=[\x00-\xff]{4}[\x00\x01])")
_SMALL_ENTRY_START = re.compile(b"(?=\x00(?!\x00\x00[\x00-\x04])[\x00-\xff]{3}[\x00\x01])")
_SMALL_WINDOW_BYTES = 1 << 24

# Walk states, one byte per position: does the chain from here reach the end (unknown, yes, no).
_UNKNOWN, _GOOD, _BAD = 0, 1, 2
# What a step answers instead of the next position.
_CHAIN_ENDS, _CHAIN_BREAKS = -1, -2


def find_message_start(buf: Buffer, *, check_every_crc: bool = True,
                       partial_tail: bool = False) -> int | None:
    """The first position in ``buf`` where a message starts; None if there is none.

    That is the smallest position from which complete entries (framing, magic and codec as
    ``message_set.scan`` checks them) follow one another and end exactly at ``len(buf)``,
    with a matching CRC in every one of them, or only in the first with ``check_every_crc``
    false. ``partial_tail`` lets the chain end in an entry cut by the end of ``buf`` (a
    fetch's ``max_size`` cuts one) if the part of its header that shows is plausible; the
    chain must still hold one complete entry.

    Checking every CRC skips past a damaged message (the chain starts after it); checking
    only the first lets a reader show the damaged message instead. Linear in ``len(buf)``.
    """
    view = memoryview(buf)
    end = len(view)
    reach = bytearray(end + 1)  # does a chain of whole entries run from here to the end
    reach[end] = _GOOD
    crc_ok = bytearray(end + 1)  # ... with every CRC matching (check_every_crc only)
    crc_ok[end] = _GOOD
    pattern = _SMALL_ENTRY_START if end < _SMALL_WINDOW_BYTES else _ENTRY_START
    for match in pattern.finditer(view):
        candidate = match.start()
        if _entry_error(view, candidate, end) is not None:
            continue  # no complete entry starts here
        if not _walk(reach, candidate, lambda position: _next_entry(view, position, end, partial_tail)):
            continue
        if check_every_crc:
            if _walk(crc_ok, candidate, lambda position: _next_checked_entry(view, position, end)):
                return candidate
        elif _crc_matches(view, candidate):
            return candidate
    return None


def entry_is_valid(buf: Buffer, position: int = 0) -> bool:
    """True if a complete entry with a matching CRC starts at ``position`` of ``buf``."""
    view = memoryview(buf)
    if _entry_error(view, position, len(view)) is not None:
        return False
    return _crc_matches(view, position)


def _crc_matches(view: memoryview, position: int) -> bool:
    """The CRC check of a complete, well-framed entry at ``position``."""
    stop = position + LENGTH_BYTES + INT32.unpack_from(view, position)[0]
    _magic, _attributes, crc, start = _payload_bounds(view, position)
    return crc32(view[start:stop]) == crc


def _next_entry(view: memoryview, position: int, end: int, partial_tail: bool) -> int:
    """Where the entry at ``position`` ends; ``_CHAIN_ENDS`` for an acceptable cut last entry,
    ``_CHAIN_BREAKS`` if no entry can start here."""
    error = _entry_error(view, position, end)
    if error is None:
        return position + LENGTH_BYTES + INT32.unpack_from(view, position)[0]
    if partial_tail and isinstance(error, TruncatedMessage) and _plausible_cut_header(view, position, end):
        return _CHAIN_ENDS
    return _CHAIN_BREAKS


def _plausible_cut_header(view: memoryview, position: int, end: int) -> bool:
    # _entry_error reports a cut entry before looking at its magic or codec, so the bytes of
    # the header that do show are checked here.
    if end - position > 4 and view[position + 4] not in (MAGIC_0, MAGIC_1):
        return False
    if end - position > 5 and view[position + 4] == MAGIC_1 and view[position + 5] & CODEC_MASK == CODEC_MASK:
        return False
    return True


def _next_checked_entry(view: memoryview, position: int, end: int) -> int:
    """Like ``_next_entry`` on a chain known to reach the end, checking the CRC too."""
    if end - position < LENGTH_BYTES:
        return _CHAIN_ENDS  # a cut length field: the chain's partial tail
    stop = position + LENGTH_BYTES + INT32.unpack_from(view, position)[0]
    if stop > end:
        return _CHAIN_ENDS  # the chain's partial tail: no CRC to check
    return stop if _crc_matches(view, position) else _CHAIN_BREAKS


def _walk(states: bytearray, position: int, step: Callable[[int], int]) -> bool:
    """Follow ``step`` from ``position`` to a position whose state is known, give every
    position on the way that state, and return whether it is ``_GOOD``."""
    path = []
    while not states[position]:
        path.append(position)
        following = step(position)
        if following < 0:
            states[position] = _GOOD if following == _CHAIN_ENDS else _BAD
            break
        position = following
    result = states[position]
    for visited in path:
        states[visited] = result
    return result == _GOOD
