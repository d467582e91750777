"""offsets: --time values and the TOPIC:BROKER-PARTITION:OFFSETS line."""

import argparse

import pytest

from twisted_broker.tools.offsets import format_offsets, offset_time


@pytest.mark.parametrize("text, value", [("latest", -1), ("earliest", -2), ("-1", -1), ("-2", -2),
                                         ("0", 0), ("1700000000000", 1700000000000)])
def test_times_are_names_or_milliseconds(text, value):
    assert offset_time(text) == value


@pytest.mark.parametrize("text", ["-3", "now", "1.5", ""])
def test_other_times_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        offset_time(text)


def test_one_line_per_partition_newest_first():
    assert format_offsets("t", "0-1", [240, 216, 0]) == "t:0-1:240,216,0"
    assert format_offsets("t", "2-0", []) == "t:2-0:"
