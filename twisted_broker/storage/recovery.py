"""Recovery of a partition after an unclean shutdown: truncate a torn or corrupt tail.

How this works (0.7's ``Log.recoverSegment``, spec 4.8): without the clean-shutdown marker, the
newest segment of each partition may end with a half-written or never-fsynced batch. It is
scanned from position 0 through a read-only memory map (no copy): each entry's length must be
at least 5 and fit in the file, its magic known and its CRC correct. The file is cut at the
first entry that fails, which is the last boundary every reader could have seen; everything
before it is kept. Older segments were complete when the log rolled past them and are not
scanned, as in 0.7: damage inside them is found when a fetch first reads it, and fenced, never
truncated (verification.py).

A stored record batch (D2) is one 0.7 gzip wrapper with a CRC like any other, so a torn one is
cut like any 0.7 entry. Cutting the segment cuts its offset index (offset_index.py) at the same
place; the index is walked again from its last row when a modern query next needs it.
"""

from __future__ import annotations

import logging
import mmap
import os

from twisted_broker.storage.segment import Segment
from twisted_broker.codec.kafka07.message_set import scan

log = logging.getLogger(__name__)


def recover_segment(segment: Segment) -> int:
    """Truncate ``segment`` after its last valid message; return the bytes cut off."""
    if segment.size == 0:
        return 0
    with open(segment.path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with memoryview(mapped) as view:
            result = scan(view, check_crc=True)
    segment.verified.add(0, result.valid_bytes)  # CRC-checked: fetches need not check it again
    if result.valid_bytes == segment.size:
        return 0
    cut = segment.size - result.valid_bytes
    log.warning("recovery of %s: truncating %d bytes at position %d (%s)",
                os.path.basename(os.path.dirname(segment.path)) + "/" + os.path.basename(segment.path),
                cut, result.valid_bytes, result.error)
    segment.truncate(result.valid_bytes)
    return cut
