"""The debug port's password (network/debug_lines.py; docs/security.md, "The debug port"):
DebugProtocol on a StringTransport, a task.Clock for the wrong password's delayed close."""

from __future__ import annotations

import logging

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.handlers.debug.commands import DebugCommands
from twisted_broker.network.debug_lines import AUTH_FAILURE_DELAY_S, BANNER_DELAY_S, DebugFactory
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log_manager import LogManager

PASSWORD = b"s3cret pass"
GREETING = b"twisted_broker debug port, broker 3: 'help' lists the commands\n\n"
REQUIRED = b"error: authentication required: send 'auth PASSWORD' first\n\n"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def commands(tmp_path, clock) -> DebugCommands:
    logs = LogManager(str(tmp_path / "logs"), now=clock.seconds, flusher=InlineFlusher())
    logs.open()
    yield DebugCommands(logs, BrokerStats(RequestStats(60, clock.seconds)), clock=clock, broker_id=3)
    logs.close()


def connect(commands, clock):
    protocol = DebugFactory(commands, clock=clock, idle_timeout_s=30, password=PASSWORD).buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def take(transport: StringTransport) -> bytes:
    data = transport.value()
    transport.clear()
    return data


def test_the_greeting_before_auth_names_no_broker_and_asks_for_the_password(commands, clock):
    _protocol, transport = connect(commands, clock)
    clock.advance(BANNER_DELAY_S)
    assert take(transport) == b"twisted_broker debug port: send 'auth PASSWORD' first\n\n"


def test_commands_and_four_letter_words_before_auth_are_refused_and_run_nothing(commands, clock):
    protocol, transport = connect(commands, clock)
    protocol.dataReceived(b"mntr\n")  # as a first line: no one-shot either
    protocol.dataReceived(b"topics\nstats\n")
    assert take(transport) == REQUIRED * 3
    assert not transport.disconnecting  # refused, not closed: the password may still come


def test_a_wrong_password_mutes_then_closes_after_the_delay_with_one_warning(commands, clock, caplog):
    protocol, transport = connect(commands, clock)
    with caplog.at_level(logging.WARNING, logger="twisted_broker.network.debug_lines"):
        protocol.dataReceived(b"auth wrong\nmntr\n")
    assert take(transport) == b"" and transport.producerState == "paused"
    assert not transport.disconnecting
    clock.advance(AUTH_FAILURE_DELAY_S)
    assert take(transport) == b"error: authentication failed\n\n"
    assert transport.disconnecting
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "wrong password" in warnings[0] and "wrong" not in warnings[0].split("from")[1]


def test_the_right_password_greets_then_serves_commands_and_words(commands, clock):
    protocol, transport = connect(commands, clock)
    protocol.dataReceived(b"auth " + PASSWORD + b"\r\nmntr\nruok\n")
    answer = take(transport)
    assert answer.startswith(GREETING)
    assert b"tb_messages_in\t" in answer and answer.endswith(b"imok\n\n")
    assert not transport.disconnecting
