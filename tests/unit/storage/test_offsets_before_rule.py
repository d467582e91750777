"""storage/offsets_before.py: 0.7's Offsets answer for one log, its -1 and -2 read without an
entry per segment, against the whole-table rule it replaces (spec 4.4)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka07.requests import EARLIEST_TIME, LATEST_TIME
from twisted_broker.storage.offsets_before import offsets_before

NOW_S = 5_000.0


class Seg(NamedTuple):
    """What the rule reads of a segment: where it starts, when it was last written (s)."""
    start: int
    modified_time: float


def table_rule(segments, end: int, now_s: float, time_ms: int, max_count: int) -> list[int]:
    """The rule as a table: an entry per segment starting at or before the end, the end as
    one more written now; the newest entry at or before the time (or the last for -1, the
    first for -2) and those before it, newest first."""
    entries = [(s.start, s.modified_time * 1000) for s in segments if s.start <= end]
    if end > entries[-1][0]:
        entries.append((end, now_s * 1000))
    if time_ms == LATEST_TIME:
        start = len(entries) - 1
    elif time_ms == EARLIEST_TIME:
        start = 0
    else:
        start = next((i for i in range(len(entries) - 1, -1, -1) if entries[i][1] <= time_ms), -1)
        if start < 0:
            return []
    return [entries[i][0] for i in range(start, start - min(max_count, start + 1), -1)]


@st.composite
def logs(draw):
    sizes = draw(st.lists(st.integers(0, 50), min_size=1, max_size=12))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    times = sorted(draw(st.lists(st.integers(1_000, 4_000), min_size=len(sizes), max_size=len(sizes))))
    segments = [Seg(start, t) for start, t in zip(starts, times)]
    # The end: anywhere from the first start to the last segment's end; a segment rolled but
    # starting past the end (not published yet) is left out of the answer.
    end = draw(st.integers(starts[0], starts[-1] + sizes[-1]))
    return segments, end


@given(logs(), st.sampled_from([LATEST_TIME, EARLIEST_TIME, 0, 999_999, 2_500_000, 4_000_000, 10_000_000]),
       st.integers(0, 15))
def test_the_answer_is_the_whole_table_rule(log, time_ms, max_count):
    segments, end = log
    assert offsets_before(segments, end, NOW_S, time_ms, max_count) == \
        table_rule(segments, end, NOW_S, time_ms, max_count)


def test_latest_and_earliest_on_a_log_of_three_segments():
    segments = [Seg(0, 1), Seg(100, 2), Seg(250, 3)]
    assert offsets_before(segments, 300, NOW_S, LATEST_TIME, 10) == [300, 250, 100, 0]
    assert offsets_before(segments, 300, NOW_S, LATEST_TIME, 1) == [300]
    assert offsets_before(segments, 250, NOW_S, LATEST_TIME, 2) == [250, 100]  # the end is a start: once
    assert offsets_before(segments, 200, NOW_S, LATEST_TIME, 3) == [200, 100, 0]  # 250 not published
    assert offsets_before(segments, 300, NOW_S, EARLIEST_TIME, 5) == [0]
    assert offsets_before(segments, 300, NOW_S, 2_000, 5) == [100, 0]
    assert offsets_before(segments, 300, NOW_S, 500, 5) == []


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="negative offset count"):
        offsets_before([Seg(0, 1)], 0, NOW_S, LATEST_TIME, -1)
