"""The debug port's commands (server/debug_commands.py): parsing, running, formatting.

Real logs under tmp_path (flushed inline unless a test holds the flusher back), a task.Clock
for the flush poll and the ZooKeeper timeout, and a fake ZooKeeper bridge whose answers the
tests control. Answers are compared as whole lines: their alignment is the interface.
"""

from __future__ import annotations

import zlib

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock

from twisted_broker.registry.zookeeper import NoNodeError
from twisted_broker.server.debug_commands import (
    MAX_DUMP_MESSAGES, MAX_TAIL_MESSAGES, MAX_ZK_CHILDREN, TAIL_WINDOW_BYTES, Answer, DebugCommands, escape_bytes,
    format_pairs, format_table, parse_line, CommandError,
)
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import FlushJob, InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.wire.compression import GZIP
from twisted_broker.wire.message_set import (
    ValidatedMessageSet, encode_compressed_message_set, encode_message_set, encode_messages, validate_message_set,
)
from twisted_broker.wire.message import Message


class ManualFlusher:
    """Keeps the fsync jobs until the test runs them, as a busy flusher thread would.

    ``release()`` runs them and every later one at once, so closing the logs cannot hang.
    """

    def __init__(self) -> None:
        self.jobs = []
        self.holding = True

    def submit(self, fd, written, owner=None):
        job = FlushJob(fd, written, owner)
        self.jobs.append(job)
        if not self.holding:
            self.run_all()
        return job

    def run_all(self) -> None:
        while self.jobs:
            self.jobs.pop(0).run()

    def release(self) -> None:
        self.holding = False
        self.run_all()

    def close(self) -> None:
        self.release()


class FakeZooKeeper:
    """The two reads of the bridge; ``hold`` makes them wait for a Deferred the test fires."""

    def __init__(self, nodes: dict[str, tuple[bytes, list[str]]]) -> None:
        self.nodes = nodes
        self.hold: Deferred | None = None

    def _answer(self, path: str, pick):
        if self.hold is not None:
            return self.hold
        if path not in self.nodes:
            return fail(NoNodeError())
        return succeed(pick(self.nodes[path]))

    def get_children(self, path: str) -> Deferred:
        return self._answer(path, lambda node: list(node[1]))

    def get(self, path: str) -> Deferred:
        return self._answer(path, lambda node: (node[0], Stat(len(node[0]), len(node[1]))))


class Stat:
    """The fields of kazoo's ZnodeStat that ``zk get`` shows."""

    def __init__(self, data_length: int, children: int) -> None:
        self.dataLength, self.numChildren = data_length, children
        self.version = 3
        self.ctime, self.mtime = 1_700_000_000_000, 1_700_000_001_500
        self.ephemeralOwner = 0x1234abcd


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(1_700_000_000)
    return clock


@pytest.fixture
def logs(tmp_path, clock) -> LogManager:
    manager = LogManager(str(tmp_path / "logs"), now=clock.seconds, partitions_for=lambda topic: 2,
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=1, file_size=300),
                         flusher=InlineFlusher())
    manager.open()
    yield manager
    manager.close()


@pytest.fixture
def stats(clock) -> BrokerStats:
    return BrokerStats(RequestStats(60, clock.seconds))


@pytest.fixture
def commands(logs, stats, clock) -> DebugCommands:
    return DebugCommands(logs, stats, clock=clock, broker_id=7)


def run(commands: DebugCommands, line: str) -> list[str]:
    """The answer's lines; the command must answer at once."""
    answers: list[Answer] = []
    commands.execute(line).addCallback(answers.append)
    assert answers, f"{line!r} did not answer at once"
    assert all(answers[0].lines), "an empty line would end the answer early"
    return answers[0].lines


def append(logs: LogManager, topic: str, partition: int, payloads=None, raw: bytes | None = None) -> None:
    data = raw if raw is not None else encode_message_set(payloads)
    logs.get_or_create_log(topic, partition).append(validate_message_set(data))


# --- formatting ----------------------------------------------------------------------------

def test_escape_bytes_keeps_printable_ascii_and_escapes_every_other_byte():
    assert escape_bytes(b"hello world") == '"hello world"'
    assert escape_bytes(b'a"b\\c') == '"a\\"b\\\\c"'
    assert escape_bytes(b"\x00\x1b[2J\n\t\r\x7f\xff\xc3\xa9") == '"\\x00\\x1b[2J\\n\\t\\r\\x7f\\xff\\xc3\\xa9"'


def test_escape_bytes_cuts_at_the_limit_and_says_how_much_is_left():
    assert escape_bytes(b"abcdef", limit=4) == '"abcd"...(+2 bytes)'
    assert escape_bytes(memoryview(b"\x00" * 10), limit=2) == '"\\x00\\x00"...(+8 bytes)'


def test_format_table_aligns_columns_and_right_aligns_numbers():
    assert format_table(["name", "count", "rate"], [("a", 5, 1.5), ("long name", 12345, 0.0)]) == [
        "name       count  rate",
        "a              5  1.50",
        "long name  12345  0.00"]


def test_format_table_leaves_no_trailing_blanks():
    lines = format_table(["a", "b"], [("x", ""), ("yyyy", "z")], indent="  ")
    assert lines == ["  a     b", "  x", "  yyyy  z"]


def test_format_pairs_aligns_names_and_numbers():
    assert format_pairs([("bytes", 12), ("per second", 1.25)], indent="  ") == [
        "  bytes         12", "  per second  1.25"]


def test_parse_line_lowercases_the_command_only():
    assert parse_line("  TAIL MyTopic  0\t5 ") == ("tail", ["MyTopic", "0", "5"])


# --- commands and arguments ---------------------------------------------------------------------

def test_unknown_command_is_an_error_answer(commands):
    assert run(commands, "frobnicate now") == ["error: unknown command 'frobnicate': 'help' lists the commands"]


def test_wrong_argument_count_answers_the_usage(commands):
    assert run(commands, "tail") == ["error: usage: tail TOPIC PARTITION [N]"]
    assert run(commands, "stats extra") == ["error: usage: stats"]
    assert run(commands, "zk ls") == ["error: usage: zk ls PATH | zk get PATH"]


def test_help_lists_every_command(commands):
    text = "\n".join(run(commands, "HELP"))
    for usage in ("help", "stats", "topics", "partitions TOPIC", "offsets TOPIC PARTITION [TIME [MAX]]",
                  "tail TOPIC PARTITION [N]", "dump TOPIC PARTITION OFFSET [MAXBYTES]", "zk ls PATH",
                  "zk get PATH", "flush [TOPIC]", "quit"):
        assert usage in text


def test_quit_answers_bye_and_closes(commands):
    answers = []
    commands.execute("quit").addCallback(answers.append)
    assert answers == [Answer(["bye"], close=True)]


def test_bad_numbers_are_error_answers(commands, logs):
    append(logs, "t", 0, [b"x"])
    assert run(commands, "tail t zero") == ["error: PARTITION must be an integer, not 'zero'"]
    assert run(commands, "tail t -1") == ["error: PARTITION must be at least 0, not -1"]
    assert run(commands, f"tail t 0 {MAX_TAIL_MESSAGES + 1}") == [
        f"error: N must be between 1 and {MAX_TAIL_MESSAGES}, not {MAX_TAIL_MESSAGES + 1}"]
    assert run(commands, "dump t 0 0 0") == ["error: MAXBYTES must be between 1 and 1048576, not 0"]
    assert run(commands, "offsets t 0 yesterday") == [
        "error: TIME must be latest, earliest, -1, -2 or milliseconds since 1970, not 'yesterday'"]


def test_bad_topic_and_partition_are_error_answers(commands, logs):
    append(logs, "t", 0, [b"x"])
    assert run(commands, "tail t 2") == ["error: partition 2 of 't' is not in [0, 2)"]
    assert run(commands, "tail t 1") == ["error: no log t-1 on this broker"]
    assert run(commands, "tail .. 0") == ["error: topic name '..' is not allowed"]
    assert run(commands, "partitions nope") == ["error: no topic 'nope' on this broker"]


def test_error_answers_escape_what_the_user_typed(commands):
    assert run(commands, "\x1b[2Jboom") == ["error: unknown command '\\x1b[2jboom': 'help' lists the commands"]


# --- listings -----------------------------------------------------------------------------------

def test_topics_lists_each_topic_with_its_partitions_and_size(commands, logs):
    assert run(commands, "topics") == ["(no topics)"]
    append(logs, "b", 0, [b"x"])
    append(logs, "a", 0, [b"hello"])
    append(logs, "a", 1, [b"hi", b"yo"])
    assert run(commands, "topics") == [
        "topic  partitions  configured  bytes  messages appended",
        "a               2           2     39                  3",
        "b               1           2     11                  1"]


def test_partitions_shows_offsets_sizes_and_partitions_without_a_log(commands, logs):
    append(logs, "a", 0, [b"hello", b"world"])
    assert run(commands, "partitions a") == [
        "partition  first offset  end offset  bytes  segments  unflushed bytes  messages appended  state",
        "        0             0          30     30         1                0                  2  ok",
        "        1             -           -      -         -                -                  -  no log yet"]


def test_offsets_before_latest_earliest_and_a_time(commands, logs, clock):
    assert run(commands, "offsets a 0") == ["offset", "     0"]  # no log: 0.7 answers 0
    assert run(commands, "offsets a 0 1000") == ["(no offsets)"]
    append(logs, "a", 0, [b"x" * 100, b"y" * 100, b"z" * 100])  # past file_size 300: the next rolls
    clock.advance(10)
    append(logs, "a", 0, [b"w"])
    assert run(commands, "offsets a 0") == ["offset", "   341"]
    assert run(commands, "offsets a 0 latest 5") == ["offset", "   341", "   330", "     0"]
    assert run(commands, "offsets a 0 -2 5") == ["offset", "     0"]
    assert run(commands, f"offsets a 0 {int(clock.seconds() * 1000) - 5000} 5") == ["offset", "     0"]


def test_stats_shows_every_section_aligned(commands, logs, stats):
    append(logs, "a", 0, [b"hello"])
    stats.topic("a").messages_in += 1
    stats.all_topics.messages_in += 1
    lines = run(commands, "stats")
    for section in ("socket server", "requests", "all topics", "log flush", "topics", "logs"):
        assert section in lines
    assert "  type          count  per second  avg ms  max ms" in lines
    assert "  produce           0        0.00    0.00    0.00" in lines
    assert "  messages in              1" in lines
    assert "  a                1         0          0               0             0" in lines
    assert "  a-0     15         1             0              15                  1" in lines


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


def test_tail_shows_only_flushed_messages(tmp_path, clock, stats):
    flusher = ManualFlusher()
    logs = LogManager(str(tmp_path / "held"), now=clock.seconds, flusher=flusher,
                      policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    logs.open()
    commands = DebugCommands(logs, stats, clock=clock, broker_id=0)
    append(logs, "a", 0, [b"first"])
    flusher.run_all()
    append(logs, "a", 0, [b"second"])
    assert [line.split()[-1] for line in run(commands, "tail a 0")[1:]] == ['"first"']
    flusher.release()
    logs.close()


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


# --- flush ------------------------------------------------------------------------------------

def test_flush_answers_once_the_flusher_made_the_data_visible(tmp_path, clock, stats):
    flusher = ManualFlusher()
    logs = LogManager(str(tmp_path / "held"), now=clock.seconds, flusher=flusher,
                      policy_for=lambda topic: LogPolicy(flush_interval_messages=1000))
    logs.open()
    commands = DebugCommands(logs, stats, clock=clock, broker_id=0)
    append(logs, "a", 0, [b"hello"])
    append(logs, "b", 0, [b"hi"])
    assert run(commands, "tail a 0") == ["(no flushed messages in a-0)"]
    answers = []
    commands.execute("flush a").addCallback(answers.append)
    assert answers == [] and len(flusher.jobs) == 1  # only a's log
    flusher.run_all()
    clock.advance(0.01)
    assert answers == [Answer(["log  end offset  state", "a-0          15  flushed"])]
    assert run(commands, "tail a 0")[1].endswith('"hello"')
    assert logs.get_log("b", 0).end_offset == 0
    flusher.release()
    logs.close()


def test_flush_gives_up_after_its_timeout(tmp_path, clock, stats):
    flusher = ManualFlusher()
    logs = LogManager(str(tmp_path / "held"), now=clock.seconds, flusher=flusher,
                      policy_for=lambda topic: LogPolicy(flush_interval_messages=1000))
    logs.open()
    commands = DebugCommands(logs, stats, clock=clock, broker_id=0, flush_timeout_s=1)
    append(logs, "a", 0, [b"hello"])
    answers = []
    commands.execute("flush").addCallback(answers.append)
    clock.pump([0.01] * 150)
    assert answers == [Answer(["error: 1 logs not flushed after 1 s"])]
    flusher.release()
    logs.close()


def test_flush_of_all_and_of_an_unknown_topic(commands, logs):
    assert run(commands, "flush") == ["(no logs to flush)"]
    append(logs, "a", 0, [b"x"])
    assert run(commands, "flush") == ["log  end offset  state", "a-0          11  flushed"]
    assert run(commands, "flush b") == ["error: no topic 'b' on this broker"]


# --- ZooKeeper --------------------------------------------------------------------------------

def zk_commands(logs, stats, clock, zk) -> DebugCommands:
    return DebugCommands(logs, stats, clock=clock, broker_id=0, zk=zk, zk_timeout_s=5)


def test_zk_without_zookeeper_is_an_error(commands):
    assert run(commands, "zk ls /brokers/ids") == ["error: ZooKeeper is not enabled"]


def test_zk_ls_lists_the_children_sorted(logs, stats, clock):
    zk = FakeZooKeeper({"/brokers/ids": (b"", ["2", "10", "1"]), "/empty": (b"", [])})
    commands = zk_commands(logs, stats, clock, zk)
    assert run(commands, "zk ls /brokers/ids") == ["1", "10", "2"]
    assert run(commands, "zk ls /empty") == ["(no children of /empty)"]
    assert run(commands, "zk ls /nope") == ["error: no ZooKeeper node /nope"]


def test_zk_get_shows_the_data_escaped_and_the_stat(logs, stats, clock):
    zk = FakeZooKeeper({"/brokers/ids/0": (b"host-1:127.0.0.1:9092\x00\xff", [])})
    assert run(zk_commands(logs, stats, clock, zk), "zk get /brokers/ids/0") == [
        'data             "host-1:127.0.0.1:9092\\x00\\xff"',
        "data length      23",
        "version          3",
        "children         0",
        "created          2023-11-14 22:13:20.000 UTC",
        "modified         2023-11-14 22:13:21.500 UTC",
        "ephemeral owner  0x1234abcd"]


def test_zk_paths_are_checked_before_asking(logs, stats, clock):
    commands = zk_commands(logs, stats, clock, FakeZooKeeper({}))
    for path in ("brokers", "/brokers/", "/a//b", "/a/../b"):
        assert run(commands, f"zk ls {path}")[0].startswith("error: PATH ")
    assert run(commands, "zk rm /a") == ["error: usage: zk ls PATH | zk get PATH"]


def test_zk_that_does_not_answer_times_out(logs, stats, clock):
    zk = FakeZooKeeper({})
    zk.hold = Deferred()
    answers = []
    zk_commands(logs, stats, clock, zk).execute("zk ls /").addCallback(answers.append)
    assert answers == []
    clock.advance(5)
    assert answers == [Answer(["error: ZooKeeper did not answer within 5 s"])]


def test_zk_failures_are_error_answers(logs, stats, clock):
    zk = FakeZooKeeper({})
    zk.hold = fail(ConnectionError("connection lost"))
    assert run(zk_commands(logs, stats, clock, zk), "zk get /") == [
        "error: ZooKeeper: ConnectionError connection lost"]


def test_a_command_error_raised_inside_is_never_a_failure(commands):
    failures = []
    commands.execute("tail").addErrback(failures.append)
    assert not failures
    with pytest.raises(CommandError):
        parse_line("   ")


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


def test_zk_ls_of_a_crowded_node_is_cut(logs, stats, clock):
    zk = FakeZooKeeper({"/consumers": (b"", [f"c{i:05d}" for i in range(MAX_ZK_CHILDREN + 7)])})
    lines = run(zk_commands(logs, stats, clock, zk), "zk ls /consumers")
    assert len(lines) == MAX_ZK_CHILDREN + 1
    assert lines[-1] == "(and 7 more)"
