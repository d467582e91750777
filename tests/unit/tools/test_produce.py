"""produce's input side: lines and length-prefixed records cut from arbitrary chunks, and the
batches they are sent in (full ones, or what there is when no more input waits)."""

import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.produce import RecordSplitter, producer_config, read_batches
from twisted_broker.cli import build_parser


def split(splitter: RecordSplitter, chunks: list[bytes]) -> list[bytes]:
    records = []
    for chunk in chunks:
        records += splitter.feed(chunk)
    return records + splitter.end()


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def test_lines_lose_their_newline_only():
    assert split(RecordSplitter(False), [b"a\n\nb\r\n", b"c"]) == [b"a", b"", b"b\r", b"c"]
    assert split(RecordSplitter(False), [b"a\n"]) == [b"a"]
    assert split(RecordSplitter(False), []) == []


@given(st.lists(st.binary().filter(lambda b: b"\n" not in b)), st.lists(st.integers(0, 10_000)))
def test_lines_survive_any_chunking(lines, cuts):
    data = b"".join(line + b"\n" for line in lines)
    assert split(RecordSplitter(False), chunked(data, cuts)) == lines


@given(st.lists(st.binary(max_size=300)), st.lists(st.integers(0, 10_000)))
def test_binary_records_survive_any_chunking(records, cuts):
    data = b"".join(struct.pack(">i", len(r)) + r for r in records)
    assert split(RecordSplitter(True), chunked(data, cuts)) == records


def test_binary_input_cut_inside_a_record_or_with_a_negative_length_fails():
    splitter = RecordSplitter(True)
    assert splitter.feed(struct.pack(">i", 1) + b"x" + struct.pack(">i", 5) + b"ab") == [b"x"]
    with pytest.raises(CommandError, match="ends inside the record at byte 5 \\(6 bytes of it\\)"):
        splitter.end()
    with pytest.raises(CommandError, match="record at byte 0 has a negative length \\(-1\\)"):
        RecordSplitter(True).feed(struct.pack(">i", -1))


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def test_batches_are_full_or_what_waits(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b"".join(b"%d\n" % i for i in range(7)))
    batches = read_batches(read_fd, RecordSplitter(False), 3)
    # Full batches first; the rest goes out at once since nothing more is waiting.
    assert [next(batches), next(batches), next(batches)] == [[b"0", b"1", b"2"], [b"3", b"4", b"5"], [b"6"]]
    os.write(write_fd, b"7\n8")
    assert next(batches) == [b"7"]
    os.close(write_fd)
    assert list(batches) == [[b"8"]]


def test_complete_records_go_out_before_a_cut_one_fails(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, struct.pack(">i", 1) + b"x" + struct.pack(">i", 9))
    os.close(write_fd)
    batches = read_batches(read_fd, RecordSplitter(True), 100)
    assert next(batches) == [b"x"]
    with pytest.raises(CommandError):
        next(batches)


def args(*argv: str):
    return build_parser().parse_args(["produce", "--topic", "t", *argv])


def test_arguments_become_a_sync_producer_config():
    parsed = args("--broker-list", "0:h:1,1:i:2", "--compression", "snappy", "--batch-size", "7",
                  "--key", "k", "--binary")
    assert (parsed.batch_size, parsed.key, parsed.binary) == (7, "k", True)
    config = producer_config(parsed)
    assert (config.broker_list, config.zk_connect, config.compression_codec, config.producer_type) == (
        "0:h:1,1:i:2", None, 2, "sync")
    config = producer_config(args("--zk", "h:1/c"))
    assert (config.zk_connect, config.broker_list, config.compression_codec) == ("h:1/c", None, 0)
    assert (args("--zk", "h:1").batch_size, args("--zk", "h:1").binary) == (200, False)
