"""consume: how payloads are written, how a fetched set becomes payloads and the next offset,
and the argument rules (one start, --group needs ZooKeeper)."""

import io
import struct

import pytest

from twisted_broker.cli import main
from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.tools.cluster import BrokerPartition
from twisted_broker.tools.consume import _payloads, write_payloads
from twisted_broker.tools.errors import CommandError
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest

TARGET = BrokerPartition(0, 0, "h", 1)


def test_payloads_are_lines_or_length_prefixed():
    out = io.BytesIO()
    write_payloads(out, [b"a", memoryview(b"b\nc"), b""], binary=False)
    assert out.getvalue() == b"a\nb\nc\n\n"
    out = io.BytesIO()
    write_payloads(out, [b"a", memoryview(b"b\nc"), b""], binary=True)
    assert out.getvalue() == b"\x00\x00\x00\x01a" b"\x00\x00\x00\x03b\nc" b"\x00\x00\x00\x00"
    out = io.BytesIO()
    write_payloads(out, [], binary=False)
    assert out.getvalue() == b""


def fetched(message_set: bytes, offset: int = 100, error: int = 0) -> FetchedMessageSet:
    return FetchedMessageSet(FetchRequest("t", 0, offset, 1 << 20), error, message_set)


def test_a_set_gives_its_payloads_and_the_offset_after_its_complete_entries():
    data = encode_message_set([b"x", b"yy"]) + encode_message_set([b"partial"])[:-3]
    payloads, next_offset = _payloads(fetched(data), TARGET, None, offsets=None)
    assert [bytes(p) for p in payloads] == [b"x", b"yy"]
    assert next_offset == 100 + 11 + 12


def test_a_limit_stops_inside_the_set_at_that_message():
    data = encode_message_set([b"x", b"yy", b"zzz"])
    payloads, next_offset = _payloads(fetched(data), TARGET, 2, offsets=None)
    assert ([bytes(p) for p in payloads], next_offset) == ([b"x", b"yy"], 100 + 11 + 12)
    assert _payloads(fetched(data), TARGET, 0, offsets=None) == ([], 100)


def test_compressed_wrappers_are_expanded():
    data = encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
    payloads, next_offset = _payloads(fetched(data), TARGET, None, offsets=None)
    assert [bytes(p) for p in payloads] == [b"a", b"b", b"c"]
    assert next_offset == 100 + len(data)


def test_a_corrupt_message_fails_and_asks_about_the_start_offset():
    data = bytearray(encode_message_set([b"hello"]))
    data[-1] ^= 1
    with pytest.raises(CommandError, match="t 0-0: the message at offset 100 fails its CRC.*message boundary"):
        _payloads(fetched(bytes(data)), TARGET, None, offsets=None)
    bad_magic = bytearray(encode_message_set([b"x", b"y"]))
    bad_magic[11 + 4] = 7
    with pytest.raises(CommandError, match="invalid message at offset 111: magic byte 7"):
        _payloads(fetched(bytes(bad_magic)), TARGET, None, offsets=None)
    misaligned = struct.pack(">i", 100000) + b"\x01" * 20  # a "length" from inside a payload
    with pytest.raises(CommandError, match="fetch size.*message boundary"):
        _payloads(fetched(misaligned), TARGET, None, offsets=None)


@pytest.mark.parametrize("argv, status, fragment", [
    (["--broker-list", "0:h:1", "--group", "g"], 2, "--group needs ZooKeeper, not --broker-list"),
    (["--zk", "h:1", "--group", "g", "--partition", "1"], 2, "--partition cannot be used with --group"),
    (["--zk", "h:1", "--group", "g", "--offset", "5"], 2, "not allowed with argument --group"),
    (["--zk", "h:1", "--from-beginning", "--offset", "5"], 2, "not allowed with argument --from-beginning"),
    (["--zk", "h:1", "--max-messages", "0"], 2, "0 is not at least 1"),
])
def test_argument_rules(argv, status, fragment, capsys):
    try:
        result = main(["consume", "--topic", "t", *argv])
    except SystemExit as exit:
        result = exit.code
    err = capsys.readouterr().err
    assert result == status
    assert err.startswith("twisted-broker: error: ") and err.count("\n") == 1 and fragment in err
