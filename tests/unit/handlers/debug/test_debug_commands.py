"""The debug port's commands (server/debug_commands.py): parsing, formatting, the listings and
flush; tail and dump are in test_debug_tail_dump.py, zk in test_debug_zookeeper.py.

Real logs under tmp_path and a task.Clock (debug_fixtures.py). Answers are compared as whole
lines: their alignment is the interface.
"""

from __future__ import annotations

import pytest

from tests.unit.handlers.debug.debug_fixtures import (  # noqa: F401 (fixtures)
    append, clock, commands, held_logs, logs, run, stats,
)
from twisted_broker.handlers.debug.commands import (
    MAX_TAIL_MESSAGES, Answer, DebugCommands, DebugCommandError, escape_bytes, format_pairs, format_table, parse_line,
)


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


# --- flush ------------------------------------------------------------------------------------

def test_flush_answers_once_the_flusher_made_the_data_visible(held_logs, clock, stats):
    logs, flusher = held_logs(flush_interval_messages=1000)
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


def test_flush_gives_up_after_its_timeout(held_logs, clock, stats):
    logs, flusher = held_logs(flush_interval_messages=1000)
    commands = DebugCommands(logs, stats, clock=clock, broker_id=0, flush_timeout_s=1)
    append(logs, "a", 0, [b"hello"])
    answers = []
    commands.execute("flush").addCallback(answers.append)
    clock.pump([0.01] * 150)
    assert answers == [Answer(["error: 1 logs not flushed after 1 s"])]


def test_flush_of_all_and_of_an_unknown_topic(commands, logs):
    assert run(commands, "flush") == ["(no logs to flush)"]
    append(logs, "a", 0, [b"x"])
    assert run(commands, "flush") == ["log  end offset  state", "a-0          11  flushed"]
    assert run(commands, "flush b") == ["error: no topic 'b' on this broker"]


def test_a_command_error_raised_inside_is_never_a_failure(commands):
    failures = []
    commands.execute("tail").addErrback(failures.append)
    assert not failures
    with pytest.raises(DebugCommandError):
        parse_line("   ")
