"""Today's Kafka clients against the modern listener (issue 16), on real brokers
(tests/support/kafka_clients/: the brokers, the clients' adapters, raw frames).

``modern_broker`` is one ``twistd -n broker`` per test module, registered in a chroot of the
session's ZooKeeper, with ``kafka.port`` on a free loopback port; ``modern_cluster`` is three
such brokers with replication factor 3 for the failover test. A listener that does not open
fails the tests that need it.

Capability checks: a test marked ``@pytest.mark.needs_api(KEY, ...)`` fails at set-up, naming
the API, when the listener's ApiVersions answer does not list that key: a missing API is a
failure that says which, never a skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.kafka_clients.kafka_frames import API_NAMES
from tests.support.kafka_clients.modern_cluster import ModernBroker, ModernCluster, start_modern
from tests.support.replicated_cluster import FAST
from tests.support.zookeeper import new_chroot


@pytest.fixture(scope="module")
def modern_broker(zookeeper, tmp_path_factory) -> Iterator[ModernBroker]:
    broker = start_modern(tmp_path_factory.mktemp("modern"), zk_connect=new_chroot(zookeeper))
    yield broker
    broker.process.kill()


@pytest.fixture(autouse=True)
def _needs_api(request) -> None:
    marker = request.node.get_closest_marker("needs_api")
    if marker is None:
        return
    broker = request.getfixturevalue("modern_cluster" if "modern_cluster" in request.fixturenames
                                     else "modern_broker")
    missing = [key for key in dict.fromkeys(marker.args) if key not in broker.apis]
    if missing:
        names = ", ".join(f"{API_NAMES.get(key, '?')} ({key})" for key in missing)
        pytest.fail(f"the listener's ApiVersions answer does not list {names}", pytrace=False)


@pytest.fixture
def topic(request) -> str:
    """A topic name of this test's own (a test's parameters included)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)
    return f"m-{name[-60:]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def modern_cluster(zookeeper, tmp_path) -> Iterator[ModernCluster]:
    cluster = ModernCluster(tmp_path, new_chroot(zookeeper), {**FAST, "num.partitions": "2"})
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()
