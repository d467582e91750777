"""Fixtures and hooks shared by every test folder, defined once in tests/support/ and
registered here (markers are registered in setup.cfg):

- ``zookeeper`` (one real server per session, per xdist worker), ``zk_connect`` (a chroot of
  it per test) and ``zk`` (a kazoo client in that chroot): tests/support/zookeeper.py;
- ``broker_factory`` and ``broker`` (``twistd -n broker`` processes): tests/support/brokers.py;
- ``replicated_cluster`` and ``three_brokers`` (replication's three brokers):
  tests/support/replicated_cluster.py;
- ``certificate`` (a self-signed one for the TLS tests): tests/support/tls.py;
- how the tests are spread over pytest-xdist's workers: tests/support/distribution.py;
- ``scale`` and the reliability summary printed at the end of the run:
  tests/support/reliability.py.
"""

from tests.support.brokers import broker, broker_factory  # noqa: F401 (fixtures)
from tests.support.distribution import pytest_collection_modifyitems  # noqa: F401 (hook)
from tests.support.reliability import (  # noqa: F401 (fixture and hooks)
    pytest_runtest_logreport, pytest_terminal_summary, scale)
from tests.support.replicated_cluster import replicated_cluster, three_brokers  # noqa: F401 (fixtures)
from tests.support.tls import certificate  # noqa: F401 (fixture)
from tests.support.zookeeper import zk, zk_connect, zookeeper  # noqa: F401 (fixtures)
