"""Producer id blocks claimed in ZooKeeper by compare-and-set: brokers never share an id."""

import pytest_twisted
from twisted.internet.defer import gatherResults

from twisted_broker.coordinator.producer.producer_ids import (
    BLOCK_SIZE, PRODUCER_ID_BLOCK, ProducerIdBlock, ZooKeeperProducerIds,
)
from twisted_broker.codec.kafka import errors


@pytest_twisted.inlineCallbacks
def test_the_first_block_is_created_and_the_next_claimed_after_it(bridge, zk):
    broker = ZooKeeperProducerIds(bridge, broker_id=3)
    first = yield broker.allocate()
    assert first == 0
    assert ProducerIdBlock.decode(zk.get(PRODUCER_ID_BLOCK)[0]) == ProducerIdBlock(3, 0, BLOCK_SIZE - 1)
    restarted = ZooKeeperProducerIds(bridge, broker_id=3)
    result = yield restarted.init_producer_id()
    assert (result.error, result.producer_id, result.producer_epoch) == (errors.NONE, BLOCK_SIZE, 0)


@pytest_twisted.inlineCallbacks
def test_brokers_claiming_at_once_get_disjoint_ids(bridge):
    brokers = [ZooKeeperProducerIds(bridge, broker_id=b) for b in range(3)]
    # each broker asks for more than a block's worth at once: several claims race on the node
    handed = yield gatherResults([b.allocate() for _ in range(BLOCK_SIZE + 10) for b in brokers])
    assert len(set(handed)) == len(handed) == 3 * (BLOCK_SIZE + 10)
    assert max(handed) < 6 * BLOCK_SIZE


@pytest_twisted.inlineCallbacks
def test_an_unreadable_block_node_answers_coordinator_not_available(bridge, zk):
    zk.create(PRODUCER_ID_BLOCK, b"not json", makepath=True)
    result = yield ZooKeeperProducerIds(bridge, broker_id=0).init_producer_id()
    assert result.error == errors.COORDINATOR_NOT_AVAILABLE
    assert zk.get(PRODUCER_ID_BLOCK)[0] == b"not json"  # left for an operator to look at
