"""Producer ids from blocks: the block's value as Kafka writes it, and the file-backed allocator
of a broker without ZooKeeper (the ZooKeeper one: tests/coordination/test_producer_ids.py)."""

import pytest

from twisted_broker.coordinator.producer.producer_ids import (
    BLOCK_SIZE, FileProducerIds, InitProducerIdResult, ProducerIdBlock, ProducerIdsExhausted,
)
from twisted_broker.codec.kafka import errors


def ids(allocator, count):
    box = []
    for _ in range(count):
        allocator.allocate().addBoth(box.append)
    return box


def test_a_block_is_written_as_kafka_writes_it_and_read_back():
    block = ProducerIdBlock(2, 1000, 1999)
    assert block.encode() == b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    assert ProducerIdBlock.decode(block.encode()) == block
    assert block.next(0) == ProducerIdBlock(0, 2000, 2999)


@pytest.mark.parametrize("value", [b"", b"{}", b"[1]", b'{"version":2,"broker":0,"block_start":"0","block_end":"9"}',
                                   b'{"version":1,"broker":0,"block_start":"9","block_end":"0"}', b"\xff"])
def test_an_unreadable_block_is_refused(value):
    with pytest.raises(ValueError):
        ProducerIdBlock.decode(value)


def test_the_last_block_of_the_long_range_is_the_last():
    with pytest.raises(ProducerIdsExhausted):
        ProducerIdBlock(0, 2**63 - BLOCK_SIZE, 2**63 - 1).next(0)


def test_ids_are_unique_across_blocks_and_restarts(tmp_path):
    first = FileProducerIds(str(tmp_path), broker_id=0)
    handed = ids(first, BLOCK_SIZE + 5)
    assert handed == list(range(BLOCK_SIZE + 5))
    assert ProducerIdBlock.decode((tmp_path / "producer_ids").read_bytes()) == ProducerIdBlock(0, 1000, 1999)
    restarted = FileProducerIds(str(tmp_path), broker_id=0)  # the rest of block 1000..1999 is skipped
    assert ids(restarted, 2) == [2000, 2001]


def test_init_producer_id_answers_a_new_id_at_epoch_zero(tmp_path):
    box = []
    FileProducerIds(str(tmp_path), broker_id=0).init_producer_id().addBoth(box.append)
    assert box == [InitProducerIdResult(errors.NONE, 0, 0)]


def test_a_block_that_cannot_be_written_answers_coordinator_not_available(tmp_path):
    allocator = FileProducerIds(str(tmp_path / "missing-dir"), broker_id=0)
    box = []
    allocator.init_producer_id().addBoth(box.append)
    assert box == [InitProducerIdResult(errors.COORDINATOR_NOT_AVAILABLE)]


def test_an_unreadable_producer_ids_file_is_refused_not_reset(tmp_path):
    (tmp_path / "producer_ids").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="producer_ids"):
        FileProducerIds(str(tmp_path), broker_id=0)
