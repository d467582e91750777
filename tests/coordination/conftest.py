"""Groups and producer ids against a real ZooKeeper (tests/conftest.py's: one per session,
a fresh chroot per test), through the broker's own kazoo bridge on the test reactor."""

from __future__ import annotations

import pytest
import pytest_twisted

from twisted_broker.registry.zookeeper import ZooKeeper


@pytest.fixture
def bridge(zk_connect):
    """The broker's kazoo bridge, connected inside the test's chroot."""
    from twisted.internet import reactor
    client = ZooKeeper(zk_connect, reactor=reactor, session_timeout_ms=4000)
    pytest_twisted.blockon(client.start(10))
    yield client
    pytest_twisted.blockon(client.stop())
