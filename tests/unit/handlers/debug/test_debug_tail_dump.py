"""The debug port's tail and dump (server/debug_commands.py): offsets, wrappers, limits, and
damaged data, which they show without changing the segments.

Real logs under tmp_path and a task.Clock (debug_fixtures.py). Answers are compared as whole
lines: their alignment is the interface.
"""

from __future__ import annotations

import zlib

from tests.unit.handlers.debug.debug_fixtures import (  # noqa: F401 (fixtures)
    append, clock, commands, held_logs, logs, run, stats,
)
from twisted_broker.handlers.debug.commands import MAX_DUMP_MESSAGES, TAIL_WINDOW_BYTES, DebugCommands
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import (
    ValidatedMessageSet, encode_compressed_message_set, encode_message_set, encode_messages, validate_message_set,
)
from twisted_broker.codec.kafka07.message import Message


# --- tail -------------------------------------------------------------------------------------

def test_tail_shows_the_last_messages_with_offsets_and_escaped_payloads(commands, logs):
    append(logs, "a", 0, [b"one", b"two", b"nul\x00 and \xff\xfe bytes"])
    assert run(commands, "tail a 0 2") == [
        "offset  next  bytes  crc  codec  payload",
        "    13    26      3  ok   none   \"two\"",
        "    26    53     17  ok   none   \"nul\\x00 and \\xff\\xfe bytes\""]


def test_tail_defaults_to_ten_and_spans_segments(commands, logs):
    for i in range(40):
        append(logs, "a", 0, [b"message %02d" % i])  # 20 bytes each: a segment every 15
    assert len(logs.get_log("a", 0).segments) >= 3
    lines = run(commands, "tail a 0")
    assert len(lines) == 11
    assert [line.split(None, 5)[-1] for line in lines[1:]] == [f'"message {i:02d}"' for i in range(30, 40)]
    assert [int(line.split()[0]) for line in lines[1:]] == [20 * i for i in range(30, 40)]
    assert len(run(commands, "tail a 0 100")) == 41


def test_tail_expands_wrappers_with_0_7_next_offsets(commands, logs):
    append(logs, "a", 0, raw=encode_compressed_message_set([b"g1", b"g2"], GZIP))
    wrapper_end = logs.get_log("a", 0).end_offset
    assert run(commands, "tail a 0") == [
        "offset  next  bytes  crc  codec     payload",
        f"     0     0      2  ok   gzip 1/2  \"g1\"",
        f"     0    {wrapper_end}      2  ok   gzip 2/2  \"g2\""]


def test_tail_finds_a_last_message_larger_than_its_first_window(commands, logs, tmp_path, clock):
    big = LogManager(str(tmp_path / "big"), now=clock.seconds, flusher=InlineFlusher(),
                     policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    big.open()
    try:
        append(big, "a", 0, [b"small"])
        append(big, "a", 0, [b"x" * (TAIL_WINDOW_BYTES * 2)])
        lines = run(DebugCommands(big, BrokerStats(RequestStats(60, clock.seconds)), clock=clock,
                                  broker_id=0), "tail a 0 2")
    finally:
        big.close()
    assert lines[1].split()[:5] == ["0", "15", "5", "ok", "none"]
    assert lines[2].split()[:5] == ["15", str(15 + 10 + TAIL_WINDOW_BYTES * 2), str(TAIL_WINDOW_BYTES * 2), "ok", "none"]
    assert lines[2].endswith(f"...(+{TAIL_WINDOW_BYTES * 2 - 200} bytes)")


def test_tail_of_an_empty_log_says_so(commands, logs):
    logs.get_or_create_log("a", 0)
    assert run(commands, "tail a 0") == ["(no flushed messages in a-0)"]


def test_tail_shows_only_flushed_messages(held_logs, clock, stats):
    logs, flusher = held_logs(flush_interval_messages=1)
    commands = DebugCommands(logs, stats, clock=clock, broker_id=0)
    append(logs, "a", 0, [b"first"])
    flusher.run_all()
    append(logs, "a", 0, [b"second"])
    assert [line.split()[-1] for line in run(commands, "tail a 0")[1:]] == ['"first"']


# --- dump -------------------------------------------------------------------------------------

def test_dump_is_bounded_by_maxbytes_and_gives_the_next_offset(commands, logs):
    append(logs, "a", 0, [b"one", b"two", b"three"])
    assert run(commands, "dump a 0 0 30") == [
        "offset  next  bytes  crc  codec  payload",
        "     0    13      3  ok   none   \"one\"",
        "    13    26      3  ok   none   \"two\"",
        "next offset 26"]


def test_dump_expands_wrappers(commands, logs):
    append(logs, "a", 0, [b"plain"])
    append(logs, "a", 0, raw=encode_compressed_message_set([b"in1", b"in\x002"], GZIP))
    lines = run(commands, "dump a 0 15")
    assert [line.split()[4:6] for line in lines[1:3]] == [["gzip", "1/2"], ["gzip", "2/2"]]
    assert lines[2].endswith('"in\\x002"')
    assert lines[-1] == f"next offset {logs.get_log('a', 0).end_offset}"


def test_dump_shows_a_corrupt_wrapper_unexpanded(commands, logs):
    # The broker refuses such a wrapper on produce; a disk (or an older broker) may hold one.
    bad = Message(1, GZIP, zlib.crc32(b"not gzip"), b"not gzip")
    logs.get_or_create_log("a", 0).append(ValidatedMessageSet(memoryview(encode_messages([bad])), 1))
    lines = run(commands, "dump a 0 0")
    assert lines[1].split()[:5] == ["0", "18", "8", "ok", "gzip"]
    assert "(not expanded:" in lines[1]


def test_dump_stops_after_the_message_limit_inside_a_large_wrapper(commands, logs, tmp_path):
    append(logs, "a", 0, raw=encode_compressed_message_set([b"m"] * (MAX_DUMP_MESSAGES + 5), GZIP))
    lines = run(commands, "dump a 0 0 100000")
    assert len(lines) == 1 + MAX_DUMP_MESSAGES + 2
    assert lines[-2] == "next offset 0"  # inside the wrapper: fetch it again (0.7's offsets)
    assert lines[-1] == f"(stopped after {MAX_DUMP_MESSAGES} messages)"


def test_dump_of_a_message_larger_than_maxbytes_says_how_large(commands, logs):
    append(logs, "a", 0, [b"x" * 100])
    assert run(commands, "dump a 0 0 50") == [
        "(the message at offset 0 is 110 bytes with its length: more than MAXBYTES 50)"]


def test_dump_at_an_offset_inside_a_message_is_an_error(commands, logs):
    append(logs, "a", 0, [b"hello world", b"again"])
    assert run(commands, "dump a 0 3 8") == [  # the bytes there read as a length of 285278225
        "error: the entry at offset 3 of a-0 would be 285278225 bytes: not a message boundary, "
        "or more than dump reads (1048576)"]
    assert run(commands, "dump a 0 1 100") == ["error: no message starts at offset 1 of a-0"]


def test_dump_at_the_end_or_past_it(commands, logs):
    append(logs, "a", 0, [b"x"])
    assert run(commands, "dump a 0 11") == ["(no messages at offset 11: the flushed end of a-0)"]
    assert run(commands, "dump a 0 12") == ["error: offset 12 is outside [0, 11] of a-0"]


# --- damaged data, and reads that change nothing ----------------------------------------------

def damaged(payload: bytes) -> ValidatedMessageSet:
    """One message whose stored CRC is wrong, appended past the broker's checks (disk damage)."""
    return ValidatedMessageSet(memoryview(encode_messages([Message(1, 0, 0xBAD, payload)])), 1)


def test_tail_shows_a_damaged_message_as_bad(commands, logs):
    log = logs.get_or_create_log("a", 0)
    log.append(validate_message_set(encode_message_set([b"good"])))
    log.append(damaged(b"rotten"))
    log.append(validate_message_set(encode_message_set([b"after"])))
    assert [line.split()[3] for line in run(commands, "tail a 0")[1:]] == ["ok", "BAD", "ok"]


def test_dump_at_a_damaged_or_misaligned_entry_is_an_error_and_later_ones_show_bad(commands, logs):
    log = logs.get_or_create_log("a", 0)
    log.append(validate_message_set(encode_message_set([b"good"])))
    log.append(damaged(b"rotten"))
    assert run(commands, "dump a 0 0")[2].split()[3] == "BAD"
    assert run(commands, "dump a 0 14") == [
        "error: the entry at offset 14 of a-0 fails its CRC check: not a message boundary, or damaged on disk"]


def test_debug_reads_at_any_offset_leave_the_segments_as_they_were(commands, logs, tmp_path, clock):
    append(logs, "a", 0, [b"hello world", b"again"])
    logs.close()  # reopened: the segment is now "loaded from disk", so fetches verify it
    logs.open()
    segment = logs.get_log("a", 0).segments[-1]
    for offset in range(0, 37):
        run(commands, f"dump a 0 {offset} 40")
    run(commands, "tail a 0")
    assert segment.damaged_messages == {}
