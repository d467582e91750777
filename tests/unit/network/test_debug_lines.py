"""DebugProtocol (protocols/debug.py) on a StringTransport, with a task.Clock for idle timeouts.

Most tests drive real DebugCommands over logs in tmp_path; the ordering and failure tests use
a scripted stand-in whose answers the test fires by hand.
"""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given, settings, strategies as st
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.network.debug_lines import BANNER_DELAY_S, MAX_LINE_BYTES, DebugFactory
from twisted_broker.handlers.debug.commands import Answer, DebugCommands
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set

BANNER = b"twisted_broker debug port, broker 3: 'help' lists the commands\n\n"
IDLE_S = 30


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def logs(tmp_path, clock) -> LogManager:
    manager = LogManager(str(tmp_path / "logs"), now=clock.seconds, flusher=InlineFlusher(),
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    manager.open()
    yield manager
    manager.close()


@pytest.fixture
def commands(logs, clock) -> DebugCommands:
    return DebugCommands(logs, BrokerStats(RequestStats(60, clock.seconds)), clock=clock, broker_id=3)


def connect(commands, clock, idle_timeout_s: float | None = IDLE_S, greeted: bool = True):
    """A session; ``greeted``: once its greeting is out (an interactive session, no one-shot)."""
    factory = DebugFactory(commands, clock=clock, idle_timeout_s=idle_timeout_s)
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    if greeted:
        clock.advance(BANNER_DELAY_S)
    return factory, protocol, transport


def take(transport: StringTransport) -> bytes:
    """What was written since the last take."""
    value = transport.value()
    transport.clear()
    return value


class ScriptedCommands:
    """Answers each line with the next Deferred of ``answers``, recording the lines."""

    def __init__(self, *answers: Deferred) -> None:
        self.answers = list(answers)
        self.lines: list[str] = []

    def banner(self) -> list[str]:
        return ["hi"]

    def is_one_shot(self, line: str) -> bool:
        return False

    def execute(self, line: str) -> Deferred:
        self.lines.append(line)
        return self.answers.pop(0)


# --- lines in, answers out --------------------------------------------------------------------

def test_greets_then_answers_each_command_ending_with_an_empty_line(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    assert take(transport) == BANNER
    protocol.dataReceived(b"topics\n")
    assert take(transport) == b"(no topics)\n\n"


def test_commands_fed_byte_by_byte_with_crlf_are_answered_once(commands, clock, logs):
    logs.get_or_create_log("a", 0).append(validate_message_set(encode_message_set([b"x"])))
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    for byte in b"offsets a 0\r\ntopics\r\n":
        protocol.dataReceived(bytes([byte]))
    assert take(transport) == (b"offset\n    11\n\n"
                               b"topic  partitions  configured  bytes  messages appended\n"
                               b"a               1           1     11                  1\n\n")


def test_errors_keep_the_session_open(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"nonsense\ntail\ntail a b\n\xff\xfe\nzk ls /\ntopics\n")
    assert take(transport).decode().split("\n\n") == [
        "error: unknown command 'nonsense': 'help' lists the commands",
        "error: usage: tail TOPIC PARTITION [N]",
        "error: PARTITION must be an integer, not 'b'",
        "error: the command is not UTF-8 text",
        "error: ZooKeeper is not enabled",
        "(no topics)",
        ""]
    assert not transport.disconnecting


def test_empty_lines_are_ignored(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"\n\r\n   \n")
    assert take(transport) == b""


def test_quit_says_bye_and_closes_ignoring_what_follows(commands, clock):
    factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"quit\ntopics\n")
    assert take(transport) == b"bye\n\n"
    assert transport.disconnecting
    protocol.connectionLost(None)
    assert factory.connections == set()


# --- bounds -----------------------------------------------------------------------------------

def test_a_line_too_long_is_refused_and_the_connection_closed(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"x" * (MAX_LINE_BYTES + 1) + b"\ntopics\n")
    assert take(transport) == f"error: line too long (more than {MAX_LINE_BYTES} bytes)\n\n".encode()
    assert transport.disconnecting


def test_a_line_too_long_without_a_newline_is_refused_before_it_is_kept(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"y" * (MAX_LINE_BYTES // 2))
    assert not transport.disconnecting
    protocol.dataReceived(b"y" * MAX_LINE_BYTES)
    assert take(transport).startswith(b"error: line too long")
    assert transport.disconnecting


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_random_bytes_never_raise_and_get_bounded_answers(tmp_path_factory, chunks):
    clock = Clock()
    logs = LogManager(str(tmp_path_factory.mktemp("random")), now=clock.seconds, flusher=InlineFlusher())
    logs.open()
    commands = DebugCommands(logs, BrokerStats(RequestStats(60, clock.seconds)), clock=clock, broker_id=3)
    _factory, protocol, transport = connect(commands, clock)
    for chunk in chunks:
        protocol.dataReceived(chunk)
    assert len(transport.value()) < 10_000
    assert transport.value().endswith(b"\n\n")
    logs.close()


# --- idle timeout ----------------------------------------------------------------------------

def test_an_idle_session_is_closed_after_the_timeout(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    clock.advance(IDLE_S - 1)
    protocol.dataReceived(b"top")  # activity, even half a line, restarts the wait
    clock.advance(IDLE_S - 1)
    assert not transport.disconnecting
    clock.advance(1)
    assert take(transport) == f"error: idle for {IDLE_S} s: closing\n\n".encode()
    assert transport.disconnecting
    protocol.connectionLost(None)
    assert not clock.getDelayedCalls()


def test_a_closed_session_leaves_no_timer(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    protocol.connectionLost(None)
    assert not clock.getDelayedCalls()


def test_a_slow_command_is_not_idle_time(clock):
    slow = Deferred()
    _factory, protocol, transport = connect(ScriptedCommands(slow), clock)
    protocol.dataReceived(b"zk ls /\n")
    clock.advance(IDLE_S * 3)
    assert not transport.disconnecting
    slow.callback(Answer(["done"]))
    assert transport.value().endswith(b"done\n\n")


# --- one command at a time --------------------------------------------------------------------

def test_commands_behind_a_slow_one_wait_in_order_and_reading_pauses(clock):
    slow = Deferred()
    scripted = ScriptedCommands(slow, succeed(Answer(["second"])), succeed(Answer(["third"])))
    _factory, protocol, transport = connect(scripted, clock)
    take(transport)
    protocol.dataReceived(b"first\nsecond\n")
    assert scripted.lines == ["first"]
    assert transport.producerState == "paused"
    protocol.dataReceived(b"third\n")  # a read already under way may still arrive
    slow.callback(Answer(["first"]))
    assert take(transport) == b"first\n\nsecond\n\nthird\n\n"
    assert scripted.lines == ["first", "second", "third"]
    assert transport.producerState == "producing"


def test_an_answer_after_the_peer_left_is_dropped(clock):
    slow = Deferred()
    _factory, protocol, transport = connect(ScriptedCommands(slow), clock)
    take(transport)
    protocol.dataReceived(b"zk ls /\n")
    protocol.connectionLost(None)
    slow.callback(Answer(["late"]))
    assert take(transport) == b""


def test_a_bug_in_a_command_is_logged_and_answered_and_the_session_goes_on(clock, caplog):
    scripted = ScriptedCommands(fail(ZeroDivisionError("oops")), succeed(Answer(["fine"])))
    _factory, protocol, transport = connect(scripted, clock)
    take(transport)
    with caplog.at_level(logging.ERROR, logger="twisted_broker.network.debug_lines"):
        protocol.dataReceived(b"stats\nstats\n")
    assert take(transport) == (b"error: internal error (ZeroDivisionError): see the broker's log\n\n"
                               b"fine\n\n")
    assert "debug command 'stats'" in caplog.text and "ZeroDivisionError" in caplog.text


def test_empty_lines_inside_an_answer_are_not_sent(clock):
    _factory, protocol, transport = connect(ScriptedCommands(succeed(Answer(["a", "", "b"]))), clock)
    take(transport)
    protocol.dataReceived(b"x\n")
    assert take(transport) == b"a\nb\n\n"


def test_disconnect_all_aborts_every_session(commands, clock):
    factory, _protocol, transport = connect(commands, clock)
    factory.disconnect_all()
    assert transport.disconnecting


def test_no_idle_timeout_when_none(commands, clock):
    _factory, _protocol, transport = connect(commands, clock, idle_timeout_s=None)
    clock.advance(10 ** 6)
    assert not transport.disconnecting


# --- four-letter words as one-shots, and a peer that half-closes ----------------------------------

def test_a_first_line_word_is_answered_without_greeting_and_the_connection_closes(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    protocol.dataReceived(b"ruok\ntopics\n")  # what follows the word is ignored, as ZooKeeper does
    assert take(transport) == b"imok\n"
    assert transport.disconnecting
    clock.advance(BANNER_DELAY_S)
    assert take(transport) == b""
    protocol.connectionLost(None)
    assert not clock.getDelayedCalls()


def test_a_one_shot_word_fed_byte_by_byte_is_answered_once(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    for byte in b"MNTR\r\n":
        protocol.dataReceived(bytes([byte]))
    lines = take(transport).decode().split("\n")
    assert lines[-1] == "" and all(lines[:-1]), "lines, no closing empty line"
    assert len(lines) - 1 >= 12 and all(re.fullmatch(r"tb_[a-z_]+\t\S+", line) for line in lines[:-1])
    assert transport.disconnecting


def test_a_word_without_its_newline_is_answered_when_the_peer_half_closes(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    protocol.dataReceived(b"ruok")
    assert take(transport) == b""
    protocol.readConnectionLost()
    assert take(transport) == b"imok\n"
    assert transport.disconnecting


def test_a_word_after_the_greeting_is_an_ordinary_command_and_the_session_stays_open(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    assert take(transport) == BANNER
    protocol.dataReceived(b"ruok\nruok\n")
    assert take(transport) == b"imok\n\nimok\n\n"
    assert not transport.disconnecting


def test_a_word_after_another_first_line_keeps_the_session_open(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    protocol.dataReceived(b"topics\nruok\n")
    assert take(transport) == BANNER + b"(no topics)\n\nimok\n\n"
    assert not transport.disconnecting
    clock.advance(BANNER_DELAY_S)
    assert take(transport) == b""  # greeted once


def test_a_first_line_that_is_no_word_is_greeted_before_its_answer(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    protocol.dataReceived(b"\nruok now\n")  # an empty line is no first line; a word with arguments no word
    assert take(transport) == BANNER + b"error: usage: ruok\n\n"
    assert not transport.disconnecting


def test_a_session_whose_peer_half_closes_answers_everything_then_closes(commands, clock):
    _factory, protocol, transport = connect(commands, clock)
    take(transport)
    protocol.dataReceived(b"topics\nruok\nhelp")
    protocol.readConnectionLost()
    answers = take(transport)
    assert answers.startswith(b"(no topics)\n\nimok\n\ncommands (one per line")
    assert answers.endswith(b"\n\n") and transport.disconnecting


def test_a_half_close_waits_for_a_slow_answer_before_closing(clock):
    slow = Deferred()
    _factory, protocol, transport = connect(ScriptedCommands(slow), clock, greeted=False)
    protocol.dataReceived(b"zk ls /\n")
    protocol.readConnectionLost()
    assert not transport.disconnecting
    slow.callback(Answer(["done"]))
    assert take(transport) == b"hi\n\ndone\n\n"
    assert transport.disconnecting


def test_a_half_close_before_any_line_closes_without_a_word(commands, clock):
    _factory, protocol, transport = connect(commands, clock, greeted=False)
    protocol.readConnectionLost()
    assert take(transport) == b""
    assert transport.disconnecting
    protocol.connectionLost(None)
    assert not clock.getDelayedCalls()
