"""Opening a partition's directory: its segment files, checked to be contiguous.

File I/O only: no Twisted, no timers.
"""

from __future__ import annotations

import os

from twisted_broker.storage.segment import Segment, parse_segment_file_name


def open_log_directory(directory: str, now: float) -> list[Segment]:
    """Open the segment files of one partition directory, sorted by start (spec 4.1, 4.8).

    Creates ``0...0.kafka`` in an empty directory. Raises ValueError if the segments are not
    contiguous (0.7 refuses to start then).
    """
    named = sorted((start, name) for name in os.listdir(directory)
                   if (start := parse_segment_file_name(name)) is not None)
    segments = ([Segment(directory, start, now=now, file_name=name) for start, name in named]
                or [Segment(directory, 0, now=now)])
    for previous, following in zip(segments, segments[1:]):
        if previous.start + previous.size != following.start:
            for segment in segments:
                segment.close()
            raise ValueError(
                f"{directory}: segment {os.path.basename(previous.path)} holds {previous.size} bytes "
                f"but the next segment starts at {following.start}: segments are not contiguous")
    return segments
