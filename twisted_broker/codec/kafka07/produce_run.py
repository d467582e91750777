"""Runs of 0.7 Produce requests that can be appended as one message set (issue 24).

A 0.7 producer that sends as it goes (the sync producer, one message per send) pipelines
Produce requests with no answer between them, so one read from its socket brings dozens,
mostly to the same partition. Appending each in turn costs a lookup, a write(2) and the
counters per message; appending their message sets joined costs them once. The bytes the log
gets are the same, since a message set is its messages back to back.

``produce_run`` finds such a run at the front of the frames a connection has queued: Produce
requests to one partition, each set plain messages that ``validate_message_set`` would pass
whole at its first step (magic 1, uncompressed, CRC right, none over the size limit), each
checked on its own so a partial tail is never read as the start of the next set. The run ends
before the first frame that is anything else — a wrapper, a bad or oversize or partial entry,
a malformed frame, another partition — and that request takes the usual path, one at a time,
which says what is wrong with it.

What a request the run cannot serve costs matters as much as what a run saves: under a backlog
the connection asks again before each such request. So the partition is asked about
(``target``) once the first frame is read, before any other is looked at, and the scan stops at
the first set that fails: a compressed producer, or a replica this broker does not lead, pays
for one frame's look per request, never for the queue behind it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from twisted_broker.codec.kafka07.message_set import ValidatedMessageSet, _scan_plain
from twisted_broker.codec.kafka07.primitives import INT16
from twisted_broker.codec.kafka07.requests import _PRODUCE

_FRAME_TYPES = (bytes, memoryview)
_PRODUCE_TYPE_BYTES = b"\x00\x00"  # int16 request type 0, as a frame starts
# Bytes of message sets after a run's first (joining them copies them once); a set bigger
# than this is appended alone, as it arrived.
MAX_RUN_BYTES = 1 << 20
_ENTRY_OVERHEAD = 6  # magic, attributes, CRC: the part of an entry's size that is not payload


def produce_run(frames: Iterable, limit: int, max_message_size: int | None,
                target: Callable[[bytes, int], Any]) -> tuple[Any, list, list[int]] | None:
    """The leading frames of ``frames`` (at most ``limit``) that are well-formed Produce
    requests naming one topic and one partition, with nothing after their message sets, each
    set plain messages that pass whole: (what ``target`` gave, their message sets, each set's
    message count). ``target(topic as sent, partition)`` is asked once, about the first frame's
    partition; a falsy answer (runs do not go there) gives None without reading further. None
    too when the first frame is not such a request."""
    destination = None
    topic = b""
    partition = 0
    size_limit = sys.maxsize if max_message_size is None else max_message_size + _ENTRY_OVERHEAD
    sets: list = []
    counts: list[int] = []
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
        end = len(frame)
        if size < 0 or head + 8 + size != end or (sets and total + size > MAX_RUN_BYTES):
            break
        name = bytes(frame[4:head])
        if destination is None:
            destination = target(name, this_partition)
            if not destination:
                return None
            topic, partition = name, this_partition
        elif name != topic or this_partition != partition:
            break
        stop, walked = _scan_plain(frame, head + 8, end, size_limit)
        if stop != end:
            break
        sets.append(frame[head + 8:])
        counts.append(walked)
        total += size
    return (destination, sets, counts) if sets else None


def run_message_set(sets: list, counts: list[int]) -> ValidatedMessageSet:
    """The validated message set that appending ``sets`` (a run's, with their ``counts``) in
    turn would have written: the sets back to back."""
    return ValidatedMessageSet(memoryview(b"".join(sets)), sum(counts))


def unflushed_after(unflushed: int, counts: list[int], interval: int) -> int:
    """The flush policy's count of unflushed messages after appending sets of ``counts``
    messages one at a time, from ``unflushed``: each append that brings it to ``interval``
    starts a flush and sets it back to 0 (storage/log.py's ``append``)."""
    for count in counts:
        unflushed += count
        if unflushed >= interval:
            unflushed = 0
    return unflushed
