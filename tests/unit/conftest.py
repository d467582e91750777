"""Fixtures shared by the unit tests of codec/kafka and storage."""

import pytest

from twisted_broker.codec.kafka.record_batch import build_batch


def make_batch(values, *, timestamps=None, keys=None, **options) -> bytearray:
    """A record batch (magic 2) of ``values``, as a producer sends it (options: build_batch's)."""
    timestamps = timestamps or [1_700_000_000_000 + i for i in range(len(values))]
    keys = keys or [None] * len(values)
    return bytearray(build_batch(list(zip(timestamps, keys, values)), **options))


@pytest.fixture(name="make_batch")
def make_batch_fixture():
    return make_batch
