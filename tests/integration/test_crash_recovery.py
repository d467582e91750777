"""Crash recovery of a real broker process: kill -9, a torn tail on disk, restart (spec 4.8).

Every message that was visible (flushed) before the crash must survive byte for byte; the torn
tail must be cut at the last valid boundary; the restarted broker must accept new produces. A
clean stop (SIGTERM) leaves ``.kafka_cleanshutdown`` and the next start skips recovery.
"""

from __future__ import annotations

import signal

import pytest

from tests.support.polling import fetch_all, latest_offset, wait_for_end
from tests.support.spec_encoding import fetch, message_set_of, produce

MARKER = ".kafka_cleanshutdown"
TOPIC = "durable"

ENTRIES = [message_set_of(b"message %d " % i + b"." * i) for i in range(10)]
VISIBLE = b"".join(ENTRIES)


def segment_path(broker, topic: str = TOPIC):
    (segment,) = sorted((broker.log_dir / f"{topic}-0").glob("*.kafka"))
    return segment


def produce_visible_then_kill(broker) -> None:
    with broker.connect() as client:
        for entry in ENTRIES:
            client.send(produce(TOPIC, 0, entry))
        assert wait_for_end(client, TOPIC, len(VISIBLE)) == len(VISIBLE)
        assert fetch_all(client, TOPIC) == VISIBLE
    broker.kill()
    assert segment_path(broker).read_bytes() == VISIBLE
    assert not (broker.log_dir / MARKER).exists()


def opened_lines(broker) -> list[str]:
    return [line for line in broker.log_tail(1 << 20).splitlines() if "opened" in line and "logs in" in line]


# Damage to the newest segment after the crash, and the bytes recovery must keep.
def partial_entry_appended(data: bytes) -> tuple[bytes, bytes]:
    torn = message_set_of(b"never acknowledged, half written" * 4)[:37]
    return data + torn, data


def garbage_appended(data: bytes) -> tuple[bytes, bytes]:
    return data + bytes(range(256)) * 3, data


def zeros_appended(data: bytes) -> tuple[bytes, bytes]:  # a preallocated, never-written tail
    return data + b"\x00" * 4096, data


def last_entry_cut_mid_message(data: bytes) -> tuple[bytes, bytes]:
    keep = len(data) - len(ENTRIES[-1])
    return data[:keep + len(ENTRIES[-1]) // 2], data[:keep]


def last_entry_cut_in_length_field(data: bytes) -> tuple[bytes, bytes]:
    keep = len(data) - len(ENTRIES[-1])
    return data[:keep + 2], data[:keep]


def last_entry_payload_corrupted(data: bytes) -> tuple[bytes, bytes]:
    keep = len(data) - len(ENTRIES[-1])
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF  # the CRC no longer matches
    return bytes(damaged), data[:keep]


@pytest.mark.parametrize("damage", [partial_entry_appended, garbage_appended, zeros_appended,
                                    last_entry_cut_mid_message, last_entry_cut_in_length_field,
                                    last_entry_payload_corrupted])
def test_restart_after_kill_truncates_torn_tail_and_keeps_every_valid_message(broker, damage):
    produce_visible_then_kill(broker)
    segment = segment_path(broker)
    torn, kept = damage(segment.read_bytes())
    segment.write_bytes(torn)

    broker.start()
    with broker.connect() as client:
        assert latest_offset(client, TOPIC) == len(kept)  # the end is the last valid boundary
        assert fetch_all(client, TOPIC) == kept  # every message before the damage, byte for byte
        assert client.request(fetch(TOPIC, offset=len(kept) + 1)) == b"\x00\x01"  # the tail is gone
        new = message_set_of(b"after the crash")
        client.send(produce(TOPIC, 0, new))
        assert wait_for_end(client, TOPIC, len(kept) + len(new)) == len(kept) + len(new)
        assert fetch_all(client, TOPIC, offset=len(kept)) == new
    assert segment.read_bytes() == kept + new
    assert opened_lines(broker)[-1].endswith(f"(recovered, {len(torn) - len(kept)} bytes truncated)")


def test_restart_after_kill_keeps_every_visible_message_of_an_undamaged_log(broker):
    produce_visible_then_kill(broker)
    broker.start()
    with broker.connect() as client:
        assert latest_offset(client, TOPIC) == len(VISIBLE)
        assert fetch_all(client, TOPIC) == VISIBLE
    assert opened_lines(broker)[-1].endswith("(recovered, 0 bytes truncated)")


def test_kill_leaves_no_clean_shutdown_marker_and_next_start_recovers(broker):
    produce_visible_then_kill(broker)  # asserts the marker is absent
    broker.start()
    lines = opened_lines(broker)
    assert len(lines) == 2
    assert "recovered" in lines[-1] and "clean shutdown" not in lines[-1]


def test_clean_stop_leaves_marker_and_next_start_skips_recovery(broker):
    with broker.connect() as client:
        for entry in ENTRIES:
            client.send(produce(TOPIC, 0, entry))
        wait_for_end(client, TOPIC, len(VISIBLE))
    assert broker.stop() == -signal.SIGTERM
    assert (broker.log_dir / MARKER).exists()
    assert segment_path(broker).read_bytes() == VISIBLE

    broker.start()
    lines = opened_lines(broker)
    assert len(lines) == 2
    assert "clean shutdown" in lines[-1]
    assert not (broker.log_dir / MARKER).exists()  # a crash from now on must recover
    with broker.connect() as client:
        assert fetch_all(client, TOPIC) == VISIBLE


def test_start_after_clean_stop_skips_the_recovery_scan(broker):
    # After a clean stop no recovery runs: even a tail appended while the broker was down
    # is served as it is (0.7: HW = file length). This pins that the marker skips the scan.
    with broker.connect() as client:
        client.send(produce(TOPIC, 0, VISIBLE))
        wait_for_end(client, TOPIC, len(VISIBLE))
    assert broker.stop() == -signal.SIGTERM
    segment = segment_path(broker)
    extra = message_set_of(b"written while the broker was down")
    segment.write_bytes(VISIBLE + extra + b"\x00\x00\x00\x63torn")

    broker.start()
    with broker.connect() as client:
        assert latest_offset(client, TOPIC) == len(VISIBLE) + len(extra) + 8
    assert "clean shutdown" in opened_lines(broker)[-1]
