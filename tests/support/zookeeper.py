"""One real ZooKeeper per test session (per xdist worker), and a chroot of its own per test.

Each test gets a ZooKeeper chroot (``/t-<uuid>``), so tests never see each other's
registrations: a cluster of its own on a shared server. The fixtures here are registered for
every folder by tests/conftest.py; the server stops when the session ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from twisted_broker.local_zookeeper import ZooKeeperServer

_ADMINS: dict[str, object] = {}  # connect string -> a started KazooClient that makes chroots


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=200)
    server.start()
    yield server
    admin = _ADMINS.pop(server.connect_string, None)
    if admin is not None:
        admin.stop()
        admin.close()
    server.stop()


def new_chroot(zookeeper) -> str:
    """A connect string with a fresh chroot of the session's ZooKeeper: a cluster of its own.
    The chroot is made by one client kept for the session (a connection per chroot cost a
    session set-up and tear-down each time)."""
    from kazoo.client import KazooClient
    admin = _ADMINS.get(zookeeper.connect_string)
    if admin is None or not admin.connected:
        admin = _ADMINS[zookeeper.connect_string] = KazooClient(hosts=zookeeper.connect_string)
        # 30 s: a module's fixture fails all its tests at once, and on a loaded 2-core machine
        # (the suite in parallel) the server's JVM has been seen not to answer within 10.
        admin.start(30)
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin.ensure_path(chroot)
    return zookeeper.connect_string + chroot


@pytest.fixture
def zk_connect(zookeeper) -> str:
    """A connect string with a fresh chroot (new_chroot)."""
    return new_chroot(zookeeper)


@pytest.fixture
def zk(zk_connect):
    """A kazoo client inside the test's chroot (test modules with other timeouts define their own)."""
    from kazoo.client import KazooClient
    client = KazooClient(hosts=zk_connect)
    client.start(10)
    yield client
    client.stop()
    client.close()
