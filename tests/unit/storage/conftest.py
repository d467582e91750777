"""Fixtures for the storage tests: a clock the test moves by hand, logs and managers under tmp_path."""

import os

import pytest

from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.message_set import (
    ValidatedMessageSet, encode_message_set, iter_entries, validate_message_set,
)
from tests.support.manual_flusher import ManualFlusher


class FakeClock:
    """``now`` for Log and LogManager: seconds that only move when the test says so."""

    def __init__(self, time: float = 1_000_000.0) -> None:
        self.time = time

    def __call__(self) -> float:
        return self.time

    def advance(self, seconds: float) -> None:
        self.time += seconds


@pytest.fixture
def manual_flusher() -> ManualFlusher:
    return ManualFlusher()


def batch(payloads) -> ValidatedMessageSet:
    """A produced message set of uncompressed magic-1 messages, validated as the broker does."""
    return validate_message_set(encode_message_set(payloads))


def read_all(log: Log, max_size: int) -> list[tuple[int, bytes]]:
    """Walk ``log`` from its first offset as a consumer does; return (offset, payload) pairs."""
    found, offset = [], log.first_offset
    while True:
        region = log.read(offset, max_size)
        if region is None:
            return found
        with region:
            data = region.read()
        entries = list(iter_entries(data, offset))
        assert entries, f"no whole message in {len(data)} bytes at {offset}: max_size too small"
        found += [(start, bytes(message.payload)) for start, _next, message in entries]
        offset = entries[-1][1]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="batch")
def batch_fixture():
    return batch


@pytest.fixture(name="read_all")
def read_all_fixture():
    return read_all


@pytest.fixture
def make_log(tmp_path, clock):
    """Open (creating if needed) the log of ``topic-partition`` under tmp_path with a policy."""
    opened = []

    def make(topic: str = "t", partition: int = 0, flusher=None, log_class=Log, log_options=None,
             **policy) -> Log:
        directory = os.path.join(tmp_path, f"{topic}-{partition}")
        os.makedirs(directory, exist_ok=True)
        log = log_class(directory, topic, partition, open_log_directory(directory, clock()),
                        policy=LogPolicy(**policy), now=clock, flusher=flusher, **(log_options or {}))
        opened.append(log)
        return log

    yield make
    for log in opened:
        for segment in log.segments:
            segment.close()


@pytest.fixture
def log_dir(tmp_path) -> str:
    return str(tmp_path / "logs")


@pytest.fixture
def make_manager(log_dir, clock):
    """An opened LogManager over log_dir; closed (without a marker) at teardown if still open."""
    managers = []

    def make(**kwargs) -> LogManager:
        manager = LogManager(log_dir, now=clock, **kwargs)
        manager.open()
        managers.append(manager)
        return manager

    yield make
    for manager in managers:
        for log in manager.logs():
            for segment in log.segments:
                segment.close()
