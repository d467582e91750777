"""A group member's owner nodes (claimed all or none, released, forgotten) and the fetcher
threads' lookups (a ZooKeeper failure answers "not now"), on a registry stand-in."""

import logging

from twisted_broker.client.consumer_stream import PartitionTopicInfo
from twisted_broker.client.group_registry import FetcherLookups, OwnedPartitions
from twisted_broker.registry.consumer_registry import RegistryError


class FakeRegistry:
    """Owner nodes as a dict; ``taken`` are owned by another consumer; ``down`` fails every call."""

    def __init__(self, taken=(), down=False):
        self.owners = {key: "someone-else-0" for key in taken}
        self.offsets = {}
        self.down = down

    def _check(self):
        if self.down:
            raise RegistryError("not connected")

    def claim(self, topic, partition, thread_id):
        self._check()
        owner = self.owners.setdefault((topic, partition), thread_id)
        return owner == thread_id

    def release(self, topic, partition, thread_id):
        self._check()
        if self.owners.get((topic, partition)) == thread_id:
            del self.owners[(topic, partition)]

    def broker_address(self, broker_id):
        self._check()
        return ("127.0.0.1", 9092 + broker_id)

    def brokers(self):
        self._check()
        return {0: ("127.0.0.1", 9092)}

    def write_offset(self, topic, partition, offset):
        self._check()
        self.offsets[(topic, partition)] = offset


SHARE = {("t", "0-0"): "c1-0", ("t", "0-1"): "c1-0", ("u", "1-0"): "c1-1"}


def test_a_whole_share_is_claimed_and_released():
    registry = FakeRegistry()
    owned = OwnedPartitions(registry)
    assert owned.claim_all(SHARE) is None
    assert owned.threads == SHARE == registry.owners
    owned.release_all()
    assert owned.threads == {} and registry.owners == {}


def test_a_partition_owned_elsewhere_releases_what_this_attempt_claimed():
    registry = FakeRegistry(taken=[("t", "0-1")])
    owned = OwnedPartitions(registry)
    assert owned.claim_all(SHARE) == ("c1-0", "t", "0-1")  # claimed in order: t 0-0 first
    assert owned.threads == {}
    assert registry.owners == {("t", "0-1"): "someone-else-0"}


def test_a_failed_release_keeps_the_nodes_not_yet_deleted():
    registry = FakeRegistry()
    owned = OwnedPartitions(registry)
    owned.claim_all(SHARE)
    registry.down = True
    try:
        owned.release_all()
    except RegistryError:
        pass
    assert owned.threads == SHARE  # the next attempt releases them


def test_forgetting_after_a_session_expiry_holds_nothing():
    owned = OwnedPartitions(FakeRegistry())
    owned.claim_all(SHARE)
    owned.forget()
    assert owned.threads == {}


def test_lookups_answer_while_zookeeper_does():
    registry = FakeRegistry()
    lookups = FetcherLookups(registry)
    info = PartitionTopicInfo("t", "0-0", "c1-0", None, None, None)
    assert lookups.broker_address(1) == ("127.0.0.1", 9093)
    assert lookups.live_brokers() == [(0, ("127.0.0.1", 9092))]
    lookups.write_reset_offset(info, 42)
    assert registry.offsets == {("t", "0-0"): 42} and info.committed_offset == 42


def test_lookups_say_not_now_and_log_when_zookeeper_fails(caplog):
    lookups = FetcherLookups(FakeRegistry(down=True))
    info = PartitionTopicInfo("t", "0-0", "c1-0", None, None, None)
    with caplog.at_level(logging.WARNING, logger="twisted_broker.client.zookeeper_consumer"):
        assert lookups.broker_address(1) is None
        assert lookups.live_brokers() == []
        lookups.write_reset_offset(info, 42)
    assert info.committed_offset is None
    assert [r.name for r in caplog.records] == ["twisted_broker.client.zookeeper_consumer"] * 3
