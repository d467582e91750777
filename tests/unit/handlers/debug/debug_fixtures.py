"""The setting of the debug commands' tests (test_debug_*.py): real logs under tmp_path, flushed
inline unless a test holds the flusher back, a task.Clock for the flush poll and the ZooKeeper
timeout, and ``run``, which gives a command's answer as its lines.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from twisted_broker.handlers.debug.commands import Answer, DebugCommands
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import FlushJob, InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set


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


@pytest.fixture
def held_logs(tmp_path, clock):
    """``held_logs(flush_interval_messages)``: (logs, flusher), logs under tmp_path whose fsyncs
    wait in a ManualFlusher until the test runs them; released and closed after the test."""
    made: list[tuple[LogManager, ManualFlusher]] = []

    def make(flush_interval_messages: int) -> tuple[LogManager, ManualFlusher]:
        flusher = ManualFlusher()
        logs = LogManager(str(tmp_path / "held"), now=clock.seconds, flusher=flusher,
                          policy_for=lambda topic: LogPolicy(flush_interval_messages=flush_interval_messages))
        logs.open()
        made.append((logs, flusher))
        return logs, flusher

    yield make
    for logs, flusher in made:
        flusher.release()
        logs.close()


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
