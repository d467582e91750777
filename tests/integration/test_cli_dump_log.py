"""``twisted-broker dump-log`` (DumpLogSegments) as a real process: on a segment the broker
wrote, on the 0.7.2 fixture, and on corrupt copies, where it names the first bad message's
offset and fails, never with a traceback."""

from __future__ import annotations

import re
import shutil
import zlib
from pathlib import Path

import pytest

from tests.support.brokers import ROOT
from tests.support.cli import assert_one_line_error, broker_list, run_cli
from tests.support.polling import fetch_all, wait_for
from twisted_broker.codec.kafka07.message_set import iter_entries

FIXTURE = ROOT / "tests/fixtures/MagicByte0-0/00000000000000000000.kafka"
FIXTURE_ENTRY = 4 + 105  # each: length 0x69, magic 0, CRC, 100 x "x"
LINE = re.compile(r"offset: (\d+) size: (\d+) magic: ([01]) codec: (\w+) crc: 0x[0-9a-f]{8} valid: (true|false)")


def dump(*paths: Path) -> tuple[int, list[str], str]:
    result = run_cli("dump-log", *paths)
    return result.returncode, result.stdout.decode().splitlines(), result.stderr.decode()


def test_the_fixture_holds_100_valid_magic_0_messages():
    status, out, err = dump(FIXTURE)
    assert (status, err) == (0, "")
    assert out[:2] == [f"Dumping {FIXTURE}", "Starting offset: 0"]
    entries = [LINE.fullmatch(line).groups() for line in out[2:-1]]
    assert entries == [(str(i * FIXTURE_ENTRY), "105", "0", "none", "true") for i in range(100)]
    assert out[-1] == f"{FIXTURE}: 100 entries, 100 messages, all valid"


def test_a_segment_written_by_the_broker_shows_wrappers_and_their_inner_messages(broker):
    cluster = ["--broker-list", broker_list(broker), "--topic", "mixed"]
    assert run_cli("produce", *cluster, input=b"plain\n").returncode == 0
    assert run_cli("produce", *cluster, "--compression", "gzip", input=b"a\nbb\nccc\n").returncode == 0
    with broker.connect() as client:
        wait_for(lambda: len(list(iter_entries(fetch_all(client, "mixed")))) == 2, "both entries to be flushed")
    segment = broker.log_dir / "mixed-0" / "00000000000000000000.kafka"
    status, out, err = dump(segment, "--payloads")
    assert (status, err) == (0, "")
    assert out[2] == f"offset: 0 size: 11 magic: 1 codec: none crc: {zlib.crc32(b'plain'):#010x} valid: true"
    assert out[3] == "  payload: plain"
    assert LINE.fullmatch(out[4]).group(1, 4, 5) == ("15", "gzip", "true")
    inner = out[6:12]
    assert [line.split(" size:")[0] for line in inner[0::2]] == ["  inner: 1/3", "  inner: 2/3", "  inner: 3/3"]
    assert all(line.endswith("codec: none crc: " + line.split("crc: ")[1]) for line in inner[0::2])
    assert inner[1::2] == ["    payload: a", "    payload: bb", "    payload: ccc"]
    assert out[-1] == f"{segment}: 2 entries, 4 messages, all valid"


def flipped_copy(tmp_path: Path, position: int, name: str = "00000000000000001000.kafka") -> Path:
    copy = tmp_path / name
    shutil.copyfile(FIXTURE, copy)
    data = bytearray(copy.read_bytes())
    data[position] ^= 0xFF
    copy.write_bytes(bytes(data))
    return copy


# Every field of the 51st message (file position 5450, the middle of the file): the length's
# first and last byte, the magic, the CRC, the payload. Each must be reported at that message.
@pytest.mark.parametrize("field_position", [0, 3, 4, 5, 8, 9, 60, 108])
def test_a_flipped_byte_is_reported_at_its_message_offset(tmp_path, field_position):
    middle = 50 * FIXTURE_ENTRY
    assert middle == FIXTURE.stat().st_size // 2
    corrupt = flipped_copy(tmp_path, middle + field_position)
    status, out, err = dump(corrupt)
    offset = 1000 + middle  # the file name says the segment starts at offset 1000
    assert out[-1].startswith(f"{corrupt}: ") and f"first invalid message at offset {offset}: " in out[-1]
    assert_one_line_error_text(status, err, f"{corrupt} at offset {offset}")
    # The 50 messages before it are listed as valid, with the segment's offsets.
    assert [LINE.fullmatch(line).group(1, 5) for line in out[2:52]] == [
        (str(1000 + i * FIXTURE_ENTRY), "true") for i in range(50)]


def assert_one_line_error_text(status: int, err: str, fragment: str) -> None:
    assert status == 1
    assert err.startswith("twisted-broker: error: invalid messages in ") and err.count("\n") == 1, err
    assert fragment in err


def test_a_crc_failure_does_not_stop_the_dump(tmp_path):
    corrupt = flipped_copy(tmp_path, 50 * FIXTURE_ENTRY + 20)  # a payload byte
    status, out, err = dump(corrupt)
    entries = [LINE.fullmatch(line).groups() for line in out[2:-1]]
    assert len(entries) == 100
    assert [valid for *_rest, valid in entries].count("false") == 1


def test_a_truncated_file_and_several_files(tmp_path):
    truncated = tmp_path / "00000000000000000000.kafka"
    truncated.write_bytes(FIXTURE.read_bytes()[:FIXTURE_ENTRY * 3 + 50])
    status, out, err = dump(FIXTURE, truncated)
    assert out[-1] == (f"{truncated}: 3 entries, 3 messages; first invalid message at offset "
                       f"{3 * FIXTURE_ENTRY}: the last 50 bytes are an incomplete message")
    assert f"{FIXTURE}: 100 entries, 100 messages, all valid" in out
    assert_one_line_error_text(status, err, f"{truncated} at offset {3 * FIXTURE_ENTRY}")


def test_garbage_and_missing_files_fail_in_one_line(tmp_path):
    garbage = tmp_path / "garbage.kafka"
    garbage.write_bytes(b"\x00\x00\x00\x07\x05" + bytes(range(200)))
    status, out, err = dump(garbage)
    assert "first invalid message at offset 0: magic byte 5" in out[-1]
    assert_one_line_error_text(status, err, f"{garbage} at offset 0")
    assert_one_line_error(run_cli("dump-log", tmp_path / "missing.kafka"), 1, "No such file")
    empty = tmp_path / "00000000000000000042.kafka"
    empty.write_bytes(b"")
    assert dump(empty) == (0, [f"Dumping {empty}", "Starting offset: 42", f"{empty}: 0 entries, 0 messages, "
                                                                          "all valid"], "")


def test_a_stored_record_batch_shows_its_header_and_records(broker_factory):
    from kafka import KafkaProducer

    from tests.support.modern_listener import start_with_listener

    broker, port = start_with_listener(broker_factory)
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1, linger_ms=50, compression_type="lz4")
    values = [b"value %d " % i * 8 for i in range(3)]  # compressible: kafka-python sends lz4 only if it is smaller
    sent = [producer.send("modern", key=b"k%d" % i, value=values[i], headers=[("h", b"%d" % i)], partition=0,
                          timestamp_ms=1_700_000_000_000 + i) for i in range(3)]
    producer.flush()
    offsets = [future.get(10).offset for future in sent]
    producer.close()
    with broker.connect() as client:
        wait_for(lambda: len(list(iter_entries(fetch_all(client, "modern")))) == 1, "the batch to be flushed")
    segment = broker.log_dir / "modern-0" / "00000000000000000000.kafka"
    status, out, err = dump(segment, "--payloads")
    assert (status, err) == (0, "")
    assert LINE.fullmatch(out[2]).group(1, 3, 4, 5) == ("0", "1", "gzip", "true")  # the 0.7 wrapper
    assert re.fullmatch(r"  batch: base offset: 0 records: 3 producer id: -1 epoch: -1 sequence: -1 "
                        r"compression: lz4 leader epoch: -?\d+ crc32c: valid", out[3]), out[3]
    assert out[4:16] == [line for i in range(3) for line in (
        f"  record: {i + 1}/3 offset: {offsets[i]} timestamp: {1_700_000_000_000 + i}",
        f"    key: k{i}", f"    headers: h={i}", f"    value: {values[i].decode()}")]
    assert out[16] == f"{segment}: 1 entries, 3 messages, all valid"
