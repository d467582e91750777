"""Corruption beyond the tail: a message damaged on disk in the middle of a segment.

What the broker does (storage/verification.py): it starts; a segment other than the one
recovered after a crash is never truncated (it holds acknowledged messages), but bytes loaded
from disk are CRC-checked the first time a fetch reaches them. A fetch then gets the messages
before the damaged one, a fetch at the damaged one gets InvalidMessage (2), the broker logs the
offset once, with the offset of the next message so an operator can move a consumer past it,
and ``dump-log`` names the same offset. Only the newest segment after a crash is cut at its
first invalid entry, as in 0.7 (a torn tail and a damaged message look alike there).
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys

import pytest

from tests.support.faults.oracle import read_log, segment_files, walk
from tests.support.polling import latest_offset, wait_for_end
from tests.support.reliability import record
from tests.support.spec_encoding import fetch, message_set_of, produce

TOPIC = "rot"
SEGMENT_BYTES = 64 * 1024
BATCHES = [message_set_of(*(b"batch %d message %d " % (b, i) + b"." * (i * 7 % 120) for i in range(40)))
           for b in range(60)]  # about 250 KB: four or five segments
LOG = b"".join(BATCHES)


def fill(broker) -> None:
    with broker.connect() as client:
        for batch in BATCHES:
            client.send(produce(TOPIC, 0, batch))
        wait_for_end(client, TOPIC, len(LOG))


def consume_until_error(broker, fetch_bytes: int = 16 * 1024) -> tuple[bytes, int, int]:
    """Fetch from 0 like a consumer; return (bytes read, offset it stopped at, error code)."""
    data = bytearray()
    with broker.connect() as client:
        while True:
            body = client.request(fetch(TOPIC, 0, len(data), fetch_bytes))
            (error,) = struct.unpack_from(">h", body)
            valid = walk(body[2:])[1]
            if error or not valid:
                return bytes(data), len(data), error
            data += body[2:2 + valid]


def damaged_lines(broker, offset: int) -> list[str]:
    return [line for line in broker.log_tail(1 << 22).splitlines()
            if f"damaged message at offset {offset} " in line]


def flip_payload_byte(path, index: int) -> tuple[int, int]:
    """Flip one payload byte of the ``index``-th entry of a segment file; return its file
    position and length (length field included)."""
    data = bytearray(path.read_bytes())
    entry = walk(bytes(data))[0][index]
    data[entry.offset + 4 + 6 + 3] ^= 0x40
    path.write_bytes(bytes(data))
    return entry.offset, len(entry.raw)


def dump_log(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twisted_broker", "dump-log", str(path)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("restart", ["after a clean stop", "after a crash"])
def test_damaged_message_in_an_older_segment_is_fenced_logged_once_and_never_truncated(
        brokers, restart, request):
    broker = brokers(properties={"log.file.size": str(SEGMENT_BYTES)}).start()
    fill(broker)
    if restart == "after a crash":
        broker.kill()
    else:
        assert broker.stop() == -signal.SIGTERM
    files = segment_files(broker.log_dir / f"{TOPIC}-0")
    assert len(files) >= 3
    older = files[1]
    position, length = flip_payload_byte(older, len(walk(older.read_bytes())[0]) // 2)
    damaged = int(older.name.split(".")[0]) + position
    following = damaged + length
    sizes = [path.stat().st_size for path in files]

    broker.start()  # an older segment's damage does not stop the broker
    assert [path.stat().st_size for path in files] == sizes  # nothing truncated
    read, stopped_at, error = consume_until_error(broker)
    assert (read, stopped_at, error) == (LOG[:damaged], damaged, 2)  # InvalidMessage at the damage
    with broker.connect() as client:
        for _ in range(3):  # asked again, directly and from before it: fenced every time
            assert client.request(fetch(TOPIC, 0, damaged)) == b"\x00\x02"
            body = client.request(fetch(TOPIC, 0, damaged - 2 * length, 1 << 20))
            assert body[:2] == b"\x00\x00" and body[2:] == LOG[damaged - 2 * length:damaged]
        # An operator moves the consumer past it: the rest is served, byte for byte.
        body = client.request(fetch(TOPIC, 0, following, 1 << 20))
        assert body[:2] == b"\x00\x00"
        assert body[2:] == LOG[following:following + len(body) - 2] and len(body) > 2
        assert latest_offset(client, TOPIC) == len(LOG)
    (line,) = damaged_lines(broker, damaged)  # logged once
    assert f"the next message starts at offset {following}" in line

    result = dump_log(older)
    assert result.returncode != 0
    assert f"first invalid message at offset {damaged}" in result.stdout + result.stderr
    assert read_log(broker.log_dir / f"{TOPIC}-0") != LOG  # the damage is still on disk, reported

    # A consumer that sits at the damaged offset when the broker restarts is refused too.
    assert broker.stop() == -signal.SIGTERM
    broker.start()
    with broker.connect() as client:
        assert client.request(fetch(TOPIC, 0, damaged)) == b"\x00\x02"
        assert client.request(fetch(TOPIC, 0, damaged)) == b"\x00\x02"
    assert len(damaged_lines(broker, damaged)) == 2  # once per broker run
    record(request, faults_injected=1, cases_tried=7, messages_checked=len(walk(read)[0]))


def test_damaged_length_field_in_an_older_segment_fences_the_rest_of_that_segment(brokers, request):
    broker = brokers(properties={"log.file.size": str(SEGMENT_BYTES)}).start()
    fill(broker)
    assert broker.stop() == -signal.SIGTERM
    older = segment_files(broker.log_dir / f"{TOPIC}-0")[1]
    data = bytearray(older.read_bytes())
    entry = walk(bytes(data))[0][10]
    data[entry.offset:entry.offset + 4] = struct.pack(">i", 0x7FFF0000)  # frames nothing
    older.write_bytes(bytes(data))
    damaged = int(older.name.split(".")[0]) + entry.offset

    broker.start()
    read, stopped_at, error = consume_until_error(broker)
    assert (read, stopped_at, error) == (LOG[:damaged], damaged, 2)
    with broker.connect() as client:
        assert client.request(fetch(TOPIC, 0, damaged)) == b"\x00\x02"
        next_segment = int(segment_files(broker.log_dir / f"{TOPIC}-0")[2].name.split(".")[0])
        body = client.request(fetch(TOPIC, 0, next_segment, 1 << 20))  # later segments still serve
        assert body[:2] == b"\x00\x00" and body[2:] == LOG[next_segment:next_segment + len(body) - 2]
    (line,) = damaged_lines(broker, damaged)
    assert "next message cannot be located" in line
    record(request, faults_injected=1, cases_tried=3, messages_checked=len(walk(read)[0]))


def test_damaged_message_in_the_newest_segment_after_a_clean_stop_is_fenced(brokers, request):
    broker = brokers().start()  # one segment: it is the newest
    fill(broker)
    assert broker.stop() == -signal.SIGTERM
    (newest,) = segment_files(broker.log_dir / f"{TOPIC}-0")
    position, length = flip_payload_byte(newest, 100)
    broker.start()
    read, stopped_at, error = consume_until_error(broker)
    assert (read, stopped_at, error) == (LOG[:position], position, 2)
    assert newest.stat().st_size == len(LOG)
    with broker.connect() as client:  # and appends go on after it
        more = message_set_of(b"after the damage")
        client.send(produce(TOPIC, 0, more))
        wait_for_end(client, TOPIC, len(LOG) + len(more))
    assert len(damaged_lines(broker, position)) == 1
    record(request, faults_injected=1, cases_tried=2, messages_checked=len(walk(read)[0]))


def test_damaged_message_in_the_newest_segment_after_a_crash_is_cut_as_in_0_7(brokers, request):
    # Recovery cannot tell a damaged message in the newest segment from a torn or lost
    # unflushed tail, so it cuts there, as 0.7 (and later Kafka) do; the log says how much.
    broker = brokers().start()
    fill(broker)
    broker.kill()
    (newest,) = segment_files(broker.log_dir / f"{TOPIC}-0")
    position, _length = flip_payload_byte(newest, 100)
    broker.start()
    assert newest.read_bytes() == LOG[:position]
    assert f"(recovered, {len(LOG) - position} bytes truncated)" in broker.log_tail(1 << 20)
    record(request, faults_injected=1, cases_tried=1)
