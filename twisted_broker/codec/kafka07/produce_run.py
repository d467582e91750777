"""Runs of 0.7 Produce requests that can be appended as one message set (issue 24).

A 0.7 producer that sends as it goes (the sync producer, one message per send) pipelines
Produce requests with no answer between them, so one read from its socket brings dozens,
mostly to the same partition. Appending each in turn costs a lookup, a write(2) and the
counters per message; appending their message sets joined costs them once. The bytes the log
gets are the same, since a message set is its messages back to back.

``produce_run`` finds such a run at the front of the frames a connection has queued, and
``validate_plain_run`` joins the run's sets when each is one ``validate_message_set`` would pass
whole at its first step (plain messages, CRC right, none over the size limit). Anything else —
a wrapper, a bad or oversize or partial entry, a malformed frame — is not a run: those requests
take the usual path, one at a time, which says what is wrong with each.
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted_broker.codec.kafka07.message_set import ValidatedMessageSet, _scan_plain
from twisted_broker.codec.kafka07.primitives import INT16
from twisted_broker.codec.kafka07.requests import _PRODUCE

_FRAME_TYPES = (bytes, memoryview)
_PRODUCE_TYPE_BYTES = b"\x00\x00"  # int16 request type 0, as a frame starts
# Bytes of message sets after a run's first (joining them copies them once); a set bigger
# than this is appended alone, as it arrived.
MAX_RUN_BYTES = 1 << 20
_ENTRY_OVERHEAD = 6  # magic, attributes, CRC: the part of an entry's size that is not payload


def produce_run(frames: Iterable, limit: int) -> tuple[bytes, int, list] | None:
    """The leading frames of ``frames`` (at most ``limit``) that are well-formed Produce
    requests naming one topic and one partition, with nothing after their message sets:
    (topic name as sent, partition, their message sets). None when the first is not one."""
    topic = None
    partition = 0
    sets: list = []
    total = 0
    for frame in frames:
        if (len(sets) == limit or type(frame) not in _FRAME_TYPES  # or an error queued after the frames
                or frame[:2] != _PRODUCE_TYPE_BYTES or len(frame) < 4):
            break
        (length,) = INT16.unpack_from(frame, 2)
        head = 4 + length
        if length < 0 or len(frame) - head < 8:
            break
        this_partition, size = _PRODUCE.unpack_from(frame, head)
        if size < 0 or head + 8 + size != len(frame) or (sets and total + size > MAX_RUN_BYTES):
            break
        name = bytes(frame[4:head])
        if topic is None:
            topic, partition = name, this_partition
        elif name != topic or this_partition != partition:
            break
        sets.append(frame[head + 8:])
        total += size
    return None if topic is None else (topic, partition, sets)


def validate_plain_run(sets: list, max_message_size: int | None) -> tuple[ValidatedMessageSet, list[int]] | None:
    """``sets`` joined, with their message count, and each set's count, when
    ``validate_message_set`` would take each whole at its first step; None when any needs its
    full check."""
    joined = b"".join(sets)
    size_limit = len(joined) if max_message_size is None else max_message_size + _ENTRY_OVERHEAD
    pos = 0
    counts = []
    for message_set in sets:
        end = pos + len(message_set)
        pos, walked = _scan_plain(joined, pos, end, size_limit)
        if pos != end:
            return None
        counts.append(walked)
    return ValidatedMessageSet(memoryview(joined), sum(counts)), counts


def unflushed_after(unflushed: int, counts: list[int], interval: int) -> int:
    """The flush policy's count of unflushed messages after appending sets of ``counts``
    messages one at a time, from ``unflushed``: each append that brings it to ``interval``
    starts a flush and sets it back to 0 (storage/log.py's ``append``)."""
    for count in counts:
        unflushed += count
        if unflushed >= interval:
            unflushed = 0
    return unflushed
