"""Fixtures of the Spark tests: one local SparkSession for the whole run, real brokers.

The SparkSession takes 10-25 s and ~1.2 GB to start, so every test shares it (tests that
use it carry the ``spark`` marker). ZooKeeper and the broker processes are the fixtures of
tests/conftest.py (tests/support/).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.spark_topics import Cluster
from tests.support.jvm_options import spark_conf


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from twisted_broker.spark.session import build_session
    # Two cores here: two task slots, and few shuffle partitions for the small aggregates.
    session = build_session("local[2]", app_name="twisted-broker-tests",
                            conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                                  **spark_conf()})
    yield session
    session.stop()


@pytest.fixture
def cluster_factory(zk_connect, broker_factory):
    """``cluster_factory(**properties)``: two brokers (ids 0 and 1) registered in a fresh
    ZooKeeper chroot, two partitions each, flushing every message."""
    def start(**properties: str) -> Cluster:
        settings = {"num.partitions": "2", **properties}
        brokers = [broker_factory(f"broker{broker_id}", broker_id=broker_id, zk_connect=zk_connect,
                                  properties=settings) for broker_id in (0, 1)]
        return Cluster(zk_connect, brokers)
    return start
