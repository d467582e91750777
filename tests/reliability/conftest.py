"""The reliability suite: faults injected into real broker processes, at two scales
(``RELIABILITY_SCALE``; the summary and the scales: tests/support/reliability.py).

The brokers are real ``twistd -n broker`` processes on loopback (tests/support/brokers.py),
with their files under ``tmp_path``; each fixture stops what it started.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from tests.support.brokers import BrokerProcess


@pytest.fixture(scope="session", autouse=True)
def enough_descriptors() -> None:
    """1,000 held connections need 1,000 descriptors here and 1,000 in the broker (which
    inherits this limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@pytest.fixture
def brokers(tmp_path) -> Iterator:
    """``brokers(name, **options)`` makes a BrokerProcess (not started); all are killed after."""
    made: list[BrokerProcess] = []

    def make(name: str = "broker", **options) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / name, **options)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.kill()
