"""bench/small_floor.py's protocols on a StringTransport: they append what they are sent and
answer with bytes the broker's own decoders (and so today's clients) accept."""

import struct

from twisted.internet.testing import StringTransport

from bench import small_clients as clients
from bench.small_floor import FloorLog, _import_protocols
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication import decode_produce_acks
from twisted_broker.codec.kafka07.responses import decode_error_and_body, decode_offsets


def _floor(tmp_path, modern=False):
    log = FloorLog(str(tmp_path / "log"))
    floor07, floor_modern = _import_protocols(log)
    protocol, transport = (floor_modern if modern else floor07)(), StringTransport()
    protocol.makeConnection(transport)
    return log, protocol, transport


def _frames(data: bytes) -> list[bytes]:
    frames, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def test_a_07_produce_appends_its_set_without_an_answer_and_offsets_reads_the_size(tmp_path):
    log, protocol, transport = _floor(tmp_path)
    for byte in clients.produce_07("t") * 2:  # byte by byte: the framing is Twisted's
        protocol.dataReceived(bytes([byte]))
    entry = encode_message_set([clients.SMALL_PAYLOAD])
    assert (tmp_path / "log").read_bytes() == entry * 2 and transport.value() == b""
    protocol.dataReceived(clients.offsets_07("t"))
    error, body = decode_error_and_body(_frames(transport.value())[0])
    assert (error, decode_offsets(body)) == (0, [2 * len(entry)])


def test_a_fetch_at_the_end_is_held_until_an_append(tmp_path):
    log, protocol, transport = _floor(tmp_path)
    protocol.dataReceived(clients.fetch_07("t", 0))
    assert transport.value() == b""
    log.append(b"abc")
    assert _frames(transport.value()) == [b"\0\0abc"]


def test_produce_ack_answers_each_part_with_its_offset(tmp_path):
    log, protocol, transport = _floor(tmp_path)
    protocol.dataReceived(clients.produce_ack_07("t", 1) * 2)
    size = len(encode_message_set([clients.SMALL_PAYLOAD]))
    answers = [decode_produce_acks(decode_error_and_body(f)[1]) for f in _frames(transport.value())]
    assert answers == [[("t", 0, 0, 0)], [("t", 0, 0, size)]]


def test_a_modern_produce_is_answered_as_produce_v3_with_its_correlation_id(tmp_path):
    log, protocol, transport = _floor(tmp_path, modern=True)
    protocol.dataReceived(clients.modern_produce("t", 1, correlation_id=41))
    [frame] = _frames(transport.value())
    assert clients.modern_produce_errors(frame) == [0]
    assert struct.unpack_from(">i", frame)[0] == 41
    assert log.size > 0


def test_acks_0_gets_no_answer(tmp_path):
    log, protocol, transport = _floor(tmp_path, modern=True)
    protocol.dataReceived(clients.modern_produce("t", 0))
    assert transport.value() == b"" and log.size > 0
